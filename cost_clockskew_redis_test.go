package ratemonitor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// behind is the real clock d behind: a host whose clock is behind the Redis server's.
type behind struct{ d time.Duration }

func (b behind) Now() time.Time { return clock.Real().Now().Add(-b.d) }
func (b behind) Sleep(ctx context.Context, d time.Duration) error {
	return clock.Real().Sleep(ctx, d)
}

// TestTokenBucketGiveBackHostClockBehindRedis: over Redis, a bucket of 10 refilled at 10 a
// second; a query charged 5 runs 1.2 s, meanwhile the bucket refills to full and ten 1-point
// queries empty it; then the answer says cost 1: nothing is owed back. With this host's clock 5 s
// behind the Redis server's TIME, the elapsed time since the charge is measured on the
// Transport's own clock (1.2 s), not against Redis TIME (negative): used stays above 6 (no
// give-back of 4; the bucket refills 1 in 100 ms while the test reads it).
func TestTokenBucketGiveBackHostClockBehindRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.Options{Prefix: "rev3-tb-skew"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rule, err := tokenbucket.Rule(10, 10)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	var tr *ratemonitor.Transport
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	defer small.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(1200 * time.Millisecond)
		for range 10 {
			req, _ := http.NewRequest(http.MethodGet, small.URL, nil)
			req.Header.Set("X-Cost", "1")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}
		w.Header().Set("X-Real-Cost", "1")
	}))
	defer slow.Close()
	tr, err = ratemonitor.New(slow.Client().Transport, ratemonitor.WithStrategy(s), ratemonitor.WithPacing(),
		ratemonitor.WithStore(store), ratemonitor.WithClock(behind{5 * time.Second}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(r *http.Request) int {
			if r.Header.Get("X-Cost") == "1" {
				return 1
			}
			return 5
		}),
		ratemonitor.WithCostReport(headerCost))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := send(tr, slow.URL, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if u := used(t, tr, "shop"); u <= 6 {
		t.Errorf("used %d after the give-back with the host clock 5 s behind Redis, want 10 (more than 6 at least: the bucket refills 1 in 100 ms)", u)
	}
}
