package ratemonitor

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestRetryAfterDateAfterWallStep: a Transport on clock.Real (the default) in a process whose
// wall clock was stepped 10 min forward after it started (NTP setting a clock that booted
// wrong): clock.Real reads 10 min behind the wall clock for the rest of the process. A 429
// with a correct Date and Retry-After = Date + 5 s pauses the key 5 s. Before the fix the
// correct Date was measured against clock.Real, found 10 min off (past MaxDateSkew), ignored,
// and the HTTP-date measured from clock.Real instead: a pause of 10 min 5 s. (The wall step
// is simulated through wallNow; checked by running the test on the code before the fix with
// the wallNow lines added.)
func TestRetryAfterDateAfterWallStep(t *testing.T) {
	step := 10 * time.Minute
	wallNow = func() time.Time { return time.Now().Add(step) }
	t.Cleanup(func() { wallNow = time.Now })
	srv, _ := upstreamtest.Counting(t, func(w http.ResponseWriter, r *http.Request) {
		wall := time.Now().Add(step)
		w.Header().Set("Date", wall.UTC().Format(http.TimeFormat))
		w.Header().Set("Retry-After", wall.Add(5*time.Second).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	})
	tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: 100, Window: time.Minute}), WithSync(SyncConfig{}))
	if _, err := upstreamtest.Get(t, &http.Client{Transport: tr}, srv.URL); err != nil {
		t.Fatal(err)
	}
	key := srv.Listener.Addr().String()
	wait, err := tr.WaitTime(context.Background(), key, 1)
	// HTTP-dates have whole seconds: the pause is from 4 s to 5 s from the response.
	if err != nil || wait <= 3*time.Second || wait > 5*time.Second {
		t.Fatalf("wait after the 429: %v, %v; want 4 s to 5 s (Retry-After = Date + 5 s)", wait, err)
	}
}
