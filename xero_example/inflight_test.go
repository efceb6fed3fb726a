package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRunInFlightLimitAvoidsConcurrent429: 10 goroutines per tenant against the local upstream,
// whose calls take 12 s of Xero time (200 ms here, 60× faster): with the in-flight limit of 5
// (the default) the run meets no 429 of either kind, minute or concurrent; the same run without
// it (-in-flight 0) meets Xero's "concurrent" 429, so the first result is the limit's doing. The
// calls last long enough that the ten goroutines overlap however slowly a loaded machine starts
// them (with 50 ms they might not); the limit's slot is given back only after the upstream has
// counted the call as ended, so the first result does not depend on timing either.
func TestRunInFlightLimitAvoidsConcurrent429(t *testing.T) {
	for _, c := range []struct {
		inFlight   string
		concurrent bool
	}{{"5", false}, {"0", true}} {
		cfg, err := parseFlags([]string{"-scale", "60", "-progress", "0", "-margin", testMargin.String(), "-tenants", "2", "-requests", "30",
			"-concurrency", "10", "-latency", "12s", "-in-flight", c.inFlight}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sum, err := run(context.Background(), cfg, &out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		if sum.sent != 60 || sum.failed != 0 || sum.problems["minute"] != 0 {
			t.Fatalf("-in-flight %s: sent %d, failures %d, 429s %v, want 60, 0 and no minute 429\n%s", c.inFlight, sum.sent, sum.failed, sum.problems, out.String())
		}
		if got := sum.problems["concurrent"] > 0; got != c.concurrent || !c.concurrent && sum.tooMany != 0 {
			t.Errorf("-in-flight %s: 429s %d %v, want concurrent ones: %v\n%s", c.inFlight, sum.tooMany, sum.problems, c.concurrent, out.String())
		}
		if want := "429s received   0"; !c.concurrent && !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
