// Package engine holds the state transitions, counters and results that algorithms and stores
// implement: the Counter one rule keeps per key, the Algorithm that makes counters, the
// Strategy that layers several rules on one key (Reserve, Admit, Peek, Sync, smoothing), and
// what an upstream has said about a key (Upstream, Update).
//
// Users configure limits with package strategy (Rule) and pick an algorithm by its package
// (rollingwindow, fixedwindow, tokenbucket); they need this package only to write an algorithm
// or a store.
//
// Nothing here reads a clock or touches a store: every operation takes the instant it happens
// at, and stores serialise access per key. That keeps the rate math testable to the nanosecond.
package engine
