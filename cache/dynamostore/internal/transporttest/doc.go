// Package transporttest tests the core's client Transport (package ratemonitor) and server
// middleware (package middleware) over the DynamoDB store, against dynalite: that writers
// racing on one key's item (conditional writes that lose) are retried within the request's
// context, never sent uncounted and never reported as a store outage, and that the rule still
// holds at the store's own grant instants.
//
// These tests live in the DynamoDB store's module, not in the core's, so that the core
// module's tests need no AWS SDK. The package has no code of its own.
package transporttest
