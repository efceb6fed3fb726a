package engine

// NewGCRA is newGCRA, for the tests of package engine_test.
var NewGCRA = newGCRA
