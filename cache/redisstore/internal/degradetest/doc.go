// Package degradetest tests the Transport's degraded mode (ratemonitor.Degrade,
// WithDegraded) against a real Redis store: outages of a stopped or restarted server, the
// hold-back, the share, the carry-over and the settling on return, a new Sentinel master,
// Close while degraded, and a paced fleet across failovers of a Redis Cluster and a Sentinel
// set. It holds only tests, through the public API (events, waits, usage, what the upstream
// received), so that the core module needs no Redis to test itself.
package degradetest
