package ratemonitor

import (
	"context"
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
// minute. The requests sent before the first answer are not paced (nothing is known: the
// burst policy refuses 10 of the first 20); every request sent after it is, and none is
// refused. The minute policy allows 200 in the 2 minutes; at least 95 % of them are used.
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
	if share < 95 || used > allowed {
		t.Errorf("%d accepted, %.1f %% of the %d allowed: want at least 95 %% (and no more than allowed)", used, share, allowed)
	}
	if !strings.Contains(tr.learnedNames("api.example"), "ietf:burst ietf:minute") {
		t.Errorf("learned %q, want the burst and minute policies", tr.learnedNames("api.example"))
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
