package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/metrics"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// The metrics fed by a real Redis store and a Transport over it: what the Redis store's and
// the degraded mode's own tests (in the redisstore module) see as events, counted here.

// okBase answers every request with 200 at once.
type okBase struct{}

func (okBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// tee gives each event to both observers.
type tee [2]observe.Observer

func (o tee) Observe(e observe.Event) { o[0].Observe(e); o[1].Observe(e) }

func newMetrics(t *testing.T) (*metrics.Observer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// TestDegradeCloseEndsGauge: a Transport closed while degraded (Redis still down) reports
// Recovered with cache.ErrClosed, once, so that the metrics' gauge of degraded Transports
// goes back to 0 (it stayed at 1 for good: found in review of issue 14).
func TestDegradeCloseEndsGauge(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, reg := newMetrics(t)
	rec := &observetest.Recorder{}
	tr, err := ratemonitor.New(okBase{}, ratemonitor.WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), ratemonitor.WithStore(st),
		ratemonitor.WithPacing(), ratemonitor.WithDegraded(ratemonitor.DegradedConfig{NoHoldBack: true}),
		ratemonitor.WithLogger(slog.New(slog.DiscardHandler)), ratemonitor.WithObserver(tee{m, rec}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := tr.Reserve(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	gauge := func(want string) {
		t.Helper()
		exp := "# HELP ratemonitor_degraded " + help(t, reg, "ratemonitor_degraded") + "\n# TYPE ratemonitor_degraded gauge\nratemonitor_degraded{store=\"redis\"} " + want + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "ratemonitor_degraded"); err != nil {
			t.Error(err)
		}
	}
	gauge("1")
	for range 2 {
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	gauge("0")
	var recovered []observe.Event
	for _, e := range rec.Events() {
		if e.Kind == observe.Recovered {
			recovered = append(recovered, e)
		}
	}
	if len(recovered) != 1 || !errors.Is(recovered[0].Err, cache.ErrClosed) || recovered[0].Store != "redis" {
		t.Errorf("Recovered events after two Closes: %+v, want one with Err wrapping cache.ErrClosed", recovered)
	}
}

// help returns metric name's help text as registered.
func help(t *testing.T, reg *prometheus.Registry, name string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetHelp()
		}
	}
	t.Fatalf("no %s metric registered", name)
	return ""
}

// TestEvictionCounted: under allkeys-lru with AllowEviction, a flood that makes Redis evict
// is reported as StateLost "eviction" events (the redisstore module's TestEvictionReported
// checks them against INFO), and the state-lost counter counts each event, once.
func TestEvictionCounted(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	c := srv.Client()
	rec := &observetest.Recorder{}
	m, reg := newMetrics(t)
	const interval = 200 * time.Millisecond
	st, err := redisstore.New(c, redisstore.Options{AllowEviction: true, CheckInterval: interval, Observer: tee{rec, m}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	evicted := func() int {
		t.Helper()
		s, err := c.Info(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("INFO stats has no evicted_keys")
		return 0
	}
	s, err := rollingwindow.New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := st.Record(ctx, s, "tenant-"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	value := strings.Repeat("x", 10_000)
	for batch := 0; evicted() == 0; batch++ {
		if batch == 100 {
			t.Fatal("no eviction after 100 batches of 1 MB")
		}
		p := c.Pipeline()
		for i := range 100 {
			p.Set(ctx, fmt.Sprintf("flood-%d-%d", batch, i), value, time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Once evicted_keys held still over 2 intervals (a check saw it, on an idle machine; 30 s
	// leave room for a loaded one), compare the counter with the events until then.
	lost := func() int {
		n := 0
		for _, e := range rec.Events() {
			if e.Kind == observe.StateLost && e.Op == "eviction" {
				n++
			}
		}
		return n
	}
	var events int
	for deadline := time.Now().Add(30 * time.Second); ; {
		before := evicted()
		time.Sleep(2 * interval)
		events = lost()
		if evicted() == before && events > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis still evicting, or no eviction event (%d), 30 s after the flood", events)
		}
	}
	// The tee gives each event to the recorder, then to the counter: a check's event may be
	// between them while the counter is read. Compare again until no event came meanwhile.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(interval) {
		events = lost()
		want := fmt.Sprintf(`
# HELP ratemonitor_store_state_lost_total Detected losses of shared state (the server restarted, evicted keys, or held an unreadable value), by store and reason.
# TYPE ratemonitor_store_state_lost_total counter
ratemonitor_store_state_lost_total{reason="eviction",store="redis"} %d
`, events)
		err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratemonitor_store_state_lost_total")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Error(err)
			break
		}
	}
	t.Logf("%d eviction events counted", events)
}
