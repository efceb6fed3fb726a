//go:build race

package cache

// raceEnabled reports whether the tests run under the race detector, under which sync.Pool
// drops what it is given at random: ristretto's Get buffers come from one, so its frequency
// sketch loses most reads.
const raceEnabled = true
