package ratemonitor

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/standin"
)

// ietfPolicies are the stand-in's two policies of the 2-minute run: 10 requests a second per
// client, and 100 a minute per account, kept under the account's partition key (pk).
func ietfPolicies() []standin.IETFPolicy {
	return []standin.IETFPolicy{
		{Name: "burst", Quota: 10, Window: time.Second},
		{Name: "minute", Quota: 100, Window: time.Minute, Partition: func(*http.Request) []byte { return []byte("acct-1") }},
	}
}

// TestLearnedIETFPolicies2Minutes: a paced Transport made without rules, 20 goroutines on one
// key for 2 minutes of virtual time against a stand-in that states draft-11 policies of 10 a
// second per client and 100 a minute per partition key, in fixed windows aligned on the
// minute. One request goes before the first answer (the first-answer gate holds the other 19:
// unpaced, the burst policy would refuse 10 of them); every request sent after it is paced, and
// none is refused. The minute policy allows 200 in the 2 minutes; at least 95 % are used.
func TestLearnedIETFPolicies2Minutes(t *testing.T) {
	sim := newLearnSim(t, 2*time.Minute)
	api := standin.NewIETF(sim.clk.Now, ietfPolicies()...)
	api.Service = 200 * time.Microsecond
	tr, err := New(sim.base(api), WithStore(sim.store), WithPacing())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sim.drive(t, tr, 20, func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/items", nil)
		req.Header.Set("Authorization", "Bearer client-1")
		return req
	})
	const allowed = 200 // two fixed minutes of 100
	used := sim.accepted.Load()
	share := 100 * float64(used) / allowed
	t.Logf("2 min virtual: %d accepted before the end (%.1f %% of the %d allowed); refused: %d of the %d sent after the first answer was read, %d of the %d sent before",
		used, share, allowed, sim.refusedAfter.Load(), sim.after.Load(), sim.refusedUnmetered.Load(), sim.unmetered.Load())
	if n := sim.refusedAfter.Load(); n != 0 {
		t.Errorf("%d requests sent after the first answer were refused, want 0", n)
	}
	sim.firstAnswerOnly(t, 1)
	if share < 95 || used > allowed {
		t.Errorf("%d accepted, %.1f %% of the %d allowed: want at least 95 %% (and no more than allowed)", used, share, allowed)
	}
	st, err := tr.Status(context.Background(), "api.example")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range st.Meters {
		got = append(got, fmt.Sprintf("%s %s %v", m.Meter, m.Key, m.Rules[0].Rule))
	}
	want := "[ietf:burst ietf:burst:api.example 10/1s ietf:minute ietf:minute:pk:YWNjdC0x 100/1m0s]"
	if fmt.Sprint(got) != want {
		t.Errorf("Status: meters %v, want %v", got, want)
	}
}

// learnedNames returns the names of the meters key learned, in order, space separated.
func (t *Transport) learnedNames(key string) string {
	l := t.learning()
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	if lk := l.keys[key]; lk != nil {
		for _, m := range lk.meters {
			names = append(names, m.name)
		}
	}
	return strings.Join(names, " ")
}

// TestLearnedLimitsSharedThroughTheStore: two Transports made without rules over one store, as
// two processes would be, 10 goroutines each, against the stand-in of the 2-minute run. The
// first to read an answer writes the policies to the store; the other reads them there on its
// first request, unless that went before (then it learns them from its own answer). Either
// way both count in the same counters. At most one request of each goes before a first answer
// (the first-answer gate); it is counted in no counter, and may take a place the other,
// already pacing, counted on: so each such request accepted may cost one refusal of the
// other's paced requests, and no more. The two together use at least 95 % of the 200 the
// minute policy allows.
func TestLearnedLimitsSharedThroughTheStore(t *testing.T) {
	sim := newLearnSim(t, 2*time.Minute)
	api := standin.NewIETF(sim.clk.Now, ietfPolicies()...)
	var trs [2]*Transport
	for i := range trs {
		tr, err := New(sim.base(api), WithStore(sim.store), WithPacing())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trs[i] = tr
	}
	both := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("X-Process") == "b" {
			return trs[1].RoundTrip(r)
		}
		return trs[0].RoundTrip(r)
	})
	sim.drive(t, both, 20, func(ctx context.Context, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/items", nil)
		if i/1_000_000%2 == 1 {
			req.Header.Set("X-Process", "b")
		}
		return req
	})
	used := sim.accepted.Load()
	t.Logf("2 min virtual, two Transports: %d accepted (%.1f %% of 200); refused: %d of the %d sent after a first answer was read, %d of the %d sent before (%d accepted)",
		used, float64(used)/2, sim.refusedAfter.Load(), sim.after.Load(), sim.refusedUnmetered.Load(), sim.unmetered.Load(), sim.unmeteredAccepted.Load())
	if n, bound := sim.refusedAfter.Load(), sim.unmeteredAccepted.Load(); n > bound {
		t.Errorf("%d refused after the first answer, more than the %d accepted uncounted before one", n, bound)
	}
	if n := sim.unmetered.Load(); n < 1 || n > 2 {
		t.Errorf("%d requests sent before a first answer, want 1 or 2", n)
	}
	if used < 190 || used > 200 {
		t.Errorf("%d accepted, want at least 95 %% of 200", used)
	}
	for i, tr := range trs {
		if got := tr.learnedNames("api.example"); got != "ietf:burst ietf:minute" {
			t.Errorf("Transport %d learned %q", i, got)
		}
	}
}
