// Package transporttest tests the core's client Transport (package ratemonitor) and server
// middleware (package middleware) over the SQLite store, with real database files: that New
// refuses what SQLite cannot hold (in-flight leases, a fixed window's sub-second margin) naming
// the option, that no credential reaches the database, a log line, an event or an error, and
// the middleware's answers when SQLite's own arithmetic decides (fixed windows, several rules),
// when the client hangs up and when the one connection is busy.
//
// These tests live in the SQLite store's module, not in the core's, so that the core module's
// tests need no SQLite driver. The package has no code of its own.
package transporttest
