package retry

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestBackoffIsLongestWaitWithinDeadline checks the wait (the monitor's on a manual clock, the
// deadline on the real one): the longest of the base backoff, Retry-After and the monitor's
// wait, and never past the context's deadline.
func TestBackoffIsLongestWaitWithinDeadline(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := rollingwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, ratemonitor.WithStore(st), ratemonitor.WithStrategy(s), ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)))
	ctx := context.Background()
	if err := st.Record(ctx, s, "full", 60); err != nil {
		t.Fatal(err)
	}
	clk.Advance(15 * time.Second)
	resp := func(ctx context.Context, status int, key string, kv ...string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.test/", nil)
		req.Header.Set("Xero-Tenant-Id", key)
		r := &http.Response{StatusCode: status, Header: http.Header{}, Request: req}
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	constant := func(d time.Duration) retryablehttp.Backoff {
		return func(time.Duration, time.Duration, int, *http.Response) time.Duration { return d }
	}
	cases := []struct {
		name string
		base time.Duration
		resp *http.Response
		want time.Duration
	}{
		{"no response: base", 3 * time.Second, nil, 3 * time.Second},
		{"free key: base", 3 * time.Second, resp(ctx, 500, "free"), 3 * time.Second},
		{"full key: monitor", 3 * time.Second, resp(ctx, 500, "full"), 45 * time.Second},
		{"Retry-After longer than the monitor", time.Second, resp(ctx, 429, "full", "Retry-After", "90"), 90 * time.Second},
		{"Retry-After on a free key", 0, resp(ctx, 503, "free", "Retry-After", "7"), 7 * time.Second},
		{"unreadable Retry-After", 0, resp(ctx, 429, "free", "Retry-After", "later"), 0},
		{"base longest", 100 * time.Second, resp(ctx, 429, "full", "Retry-After", "90"), 100 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Backoff(tr, constant(c.base))(time.Second, 30*time.Second, 1, c.resp); got != c.want {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		})
	}
	// A deadline 40 s away: before the full key's 45 s and a Retry-After of 60 or 90 s, well
	// after one of 2 s, however long the steps below take on a loaded machine. A wait capped at
	// the deadline is the time left to it, read on the real clock just before and just after.
	dctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	dl, _ := dctx.Deadline()
	most := time.Until(dl)
	got := Backoff(tr, constant(0))(0, 0, 1, resp(dctx, 429, "full", "Retry-After", "90"))
	if least := time.Until(dl); got > most || got < least {
		t.Errorf("wait with a 40 s deadline: %v, want the time left to it, %v to %v", got, least, most)
	}

	check := CheckRetry(tr, retryablehttp.DefaultRetryPolicy)
	if retry, err := check(dctx, resp(dctx, 429, "free", "Retry-After", "60"), nil); retry || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Retry-After past the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 500, "full"), nil); retry || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("monitor wait past the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 429, "free", "Retry-After", "2"), nil); !retry || err != nil {
		t.Errorf("Retry-After within the deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(ctx, resp(ctx, 429, "full", "Retry-After", "3000"), nil); !retry || err != nil {
		t.Errorf("no deadline: retry %v, %v", retry, err)
	}
	if retry, err := check(dctx, resp(dctx, 404, "full"), nil); retry || err != nil {
		t.Errorf("not retryable: retry %v, %v", retry, err)
	}
}
