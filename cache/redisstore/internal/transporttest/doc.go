// Package transporttest tests the ratemonitor Transport over a real Redis (the redisstore
// store on a redis-server started by package redistest): sharing counts, pauses and
// in-flight leases between processes, Redis going down, hanging or restarting, the stores'
// scripts against the memory store's answers, and no credential reaching Redis.
//
// The tests live here, in the Redis store's module, so that the core module's tests need
// neither go-redis nor a redis-server. They use the Transport's public API only: what the
// upstream received, the errors returned, AllocationUsed, WaitTime, Status and the observer's
// events. The package has no non-test code.
package transporttest
