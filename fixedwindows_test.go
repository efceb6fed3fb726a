package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestFixedWindowProbesOncePerInterval: an upstream allows 5 an hour in a fixed window that
// resets 20 min after the first call, says how many are left (X-Left) and never when the
// window resets, and refuses with a bare 429. Its hour is marked fixed with a probe every
// 5 min. The client sends whenever the Transport's wait says it may: 5 calls at 0; then one
// call at 5, 10 and 15 min, each refused (one refusal per interval, and no other call); one at
// 20 min, accepted with 4 left: the window has turned, and the 4 others go at once. The
// rolling hour alone would have held the key until 60 min.
func TestFixedWindowProbesOncePerInterval(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	clk := clock.NewManual(t0)
	reset := t0.Add(20 * time.Minute)
	var mu sync.Mutex
	used := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !clk.Now().Before(reset) {
			used, reset = 0, reset.Add(time.Hour)
		}
		if used == 5 {
			w.Header().Set("X-Left", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		used++
		w.Header().Set("X-Left", strconv.Itoa(5-used))
	}))
	defer srv.Close()
	left := headers.ReaderFunc(func(h http.Header, _ time.Time) headers.Report {
		n, err := strconv.Atoi(h.Get("X-Left"))
		if err != nil {
			return headers.Report{}
		}
		return headers.Report{Signals: []headers.Signal{{Window: time.Hour, Remaining: n, Limit: 5, Reset: headers.Unknown}}}
	})
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tr, err := New(srv.Client().Transport, WithRules(strategy.Rule{Limit: 5, Window: time.Hour}), WithClock(clk), WithStore(mem),
		WithSync(SyncConfig{Readers: []headers.Reader{left}, Fixed: map[time.Duration]time.Duration{time.Hour: 5 * time.Minute}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	ctx := context.Background()
	var log []string
	for accepted := 0; accepted < 10; {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		st, err := tr.Status(ctx, tr.Key(req))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(st.Wait)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			accepted++
		}
		log = append(log, clk.Now().Sub(t0).String()+":"+strconv.Itoa(resp.StatusCode))
	}
	got := strings.Join(log, " ")
	want := "0s:200 0s:200 0s:200 0s:200 0s:200 5m0s:429 10m0s:429 15m0s:429 20m0s:200 20m0s:200 20m0s:200 20m0s:200 20m0s:200"
	if got != want {
		t.Errorf("calls (instant from the start: status):\n got %s\nwant %s", got, want)
	}
}

// TestFixedWindowsChecked: SyncConfig.Fixed must name a rule's window, and a probe interval
// from 0 to MaxPause.
func TestFixedWindowsChecked(t *testing.T) {
	hour := strategy.Rule{Limit: 5, Window: time.Hour}
	for _, c := range []struct {
		fixed map[time.Duration]time.Duration
		want  string
	}{
		{map[time.Duration]time.Duration{time.Minute: 0}, "Fixed names the window 1m0s, and no rule has it (the rules are 5/1h0m0s)"},
		{map[time.Duration]time.Duration{time.Hour: -time.Second}, "Fixed[1h0m0s] = -1s"},
		{map[time.Duration]time.Duration{time.Hour: 25 * time.Hour}, "Fixed[1h0m0s] = 25h0m0s"},
		{map[time.Duration]time.Duration{0: 0}, "Fixed[0s] = 0s"},
	} {
		_, err := New(nil, WithRules(hour), WithSync(SyncConfig{Fixed: c.fixed}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Fixed %v: error %v, want one containing %q", c.fixed, err, c.want)
		}
	}
	if tr, err := New(nil, WithRules(hour), WithSync(SyncConfig{Fixed: map[time.Duration]time.Duration{time.Hour: 0}})); err != nil {
		t.Errorf("Fixed of the rule's window: %v", err)
	} else {
		tr.Close()
	}
}
