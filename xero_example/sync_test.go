package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestSyncLearnsOfForeignCalls: another app has used 30 of each tenant's minute. Counting
// alone, the example runs into 30 429s per tenant; with -sync the first response's
// X-MinLimit-Remaining raises the count and the upstream sends no 429 at all. The run without
// -sync, which must meet the other app's calls while they count, runs at scale 20: their minute
// is 3 s of real time, which a loaded machine's start of the run cannot use up (at scale 60 it
// would be 1 s); its 60 requests a tenant all go in that minute.
func TestSyncLearnsOfForeignCalls(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run("sync="+strconv.FormatBool(sync), func(t *testing.T) {
			scale, requests := "20", "60"
			if sync {
				scale, requests = "60", "90"
			}
			args := []string{"-scale", scale, "-tenants", "2", "-requests", requests, "-foreign", "30", "-progress", "0", "-margin", testMargin.String()}
			if sync {
				args = append(args, "-sync")
			}
			cfg, err := parseFlags(args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			sum, err := run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !sync {
				if sum.tooMany == 0 {
					t.Fatalf("without -sync the foreign calls caused no 429: the test cannot tell sync from luck\n%s", out.String())
				}
				return
			}
			if sum.sent != 180 || sum.tooMany != 0 || sum.upstreamRefused != 0 || sum.failed != 0 {
				t.Fatalf("with -sync: sent %d, 429s %d (upstream sent %d), failures %d\n%s", sum.sent, sum.tooMany, sum.upstreamRefused, sum.failed, out.String())
			}
			for id, p := range sum.peaks {
				if p > 60 {
					t.Errorf("%s: upstream peak %d", id, p)
				}
			}
			for _, want := range []string{"the upstream last said", "xero-app", "429s sent       0"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
