package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMargin is the margin the runs hold on each window (-margin): 30 s of Xero time, 500 ms of
// real time at the tests' scale of 60. It covers the time from recording a request to the
// upstream counting it (the first burst's new connections, a busy scheduler) on a loaded 2-core
// machine running -race, which the runs' "no 429" relies on; each window of the run takes
// 1.5 s instead of 1.1 s with the 6 s the tests held before.
const testMargin = 30 * time.Second
