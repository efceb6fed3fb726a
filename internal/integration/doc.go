// Package integration holds the tests that combine modules of this repository, such as the
// Prometheus metrics (module metrics) fed by a real Redis store (module cache/redisstore). It
// is a module of its own that nothing depends on, so that no library module has to require
// another only for its tests (a metrics user's module graph gets no Redis client). The
// package has no code of its own.
package integration
