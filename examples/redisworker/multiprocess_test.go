package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/internal/redistest"
)

// strict is an upstream that enforces limit per window per tenant from its own log of arrival
// instants (s counts at t while s ≤ t < s+W), answering 429 to anything over.
type strict struct {
	limit  int
	window time.Duration

	mu       sync.Mutex
	arrivals map[string][]time.Time
	refused  int
}

func (u *strict) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	tenant := r.Header.Get("Xero-Tenant-Id")
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.arrivals[tenant] {
		if now.Sub(s) < u.window {
			n++
		}
	}
	if n >= u.limit {
		u.refused++
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u.arrivals[tenant] = append(u.arrivals[tenant], now)
}

// TestFourProcesses: four OS processes pace 60 requests each for the same two tenants through
// their own Transports, sharing one Redis, against one upstream that strictly enforces 60 per
// 2 s per tenant. The upstream sees no 429, and the throughput is at least 95 % of the limit.
func TestFourProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	srv := redistest.Start(t)
	const limit, window, procs, each = 60, 2 * time.Second, 4, 60
	up := &strict{limit: limit, window: window, arrivals: map[string][]time.Time{}}
	upstream := httptest.NewServer(up)
	defer upstream.Close()

	bin := filepath.Join(t.TempDir(), "redisworker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range procs {
		cmd := exec.Command(bin, "-redis", srv.Addr, "-upstream", upstream.URL, "-tenants", "tenant-a,tenant-b",
			"-requests", "60", "-limit", "60", "-window", window.String())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v\n%s", i, err, outs[i])
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.refused != 0 {
		t.Fatalf("the upstream refused %d requests", up.refused)
	}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		a := up.arrivals[tenant]
		if len(a) != procs*each {
			t.Fatalf("%s: upstream accepted %d, want %d", tenant, len(a), procs*each)
		}
		slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
		// 240 requests at 60 per window need 3 windows after the first burst: the best
		// possible span from first to last arrival.
		best := time.Duration((procs*each-1)/limit) * window
		span := a[len(a)-1].Sub(a[0])
		ratio := best.Seconds() / span.Seconds()
		t.Logf("%s: %d requests in %v (best %v): %.1f %% of the limit's throughput", tenant, len(a), span.Round(time.Millisecond), best, 100*ratio)
		if ratio < 0.95 {
			t.Errorf("%s: throughput %.1f %% of the limit, want ≥ 95 %%", tenant, 100*ratio)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
