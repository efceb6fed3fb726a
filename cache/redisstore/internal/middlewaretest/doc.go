// Package middlewaretest tests the core's server middleware (package middleware) over the
// Redis store, with real redis-server processes: its answers when Redis goes down (503 instead
// of serving uncounted under the default OutagePolicy, Reject), and that no credential reaches a Redis
// key, a response, an event or an error.
//
// These tests live in the Redis store's module, not in the core's, so that the core module's
// tests need no Redis client. The package has no code of its own.
package middlewaretest
