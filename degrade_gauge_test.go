package ratemonitor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/redistest"
	"github.com/ratemonitor/ratemonitor/metrics"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestDegradeCloseEndsGauge: a Transport closed while degraded (Redis still down) reports
// Recovered with cache.ErrClosed, once, so that the metrics' gauge of degraded Transports
// goes back to 0 (it stayed at 1 for good: found in review of issue 14).
func TestDegradeCloseEndsGauge(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &observe.Recorder{}
	tr, err := New(&okBase{}, WithRules(strategy.Rule{Limit: 20, Window: time.Minute}), WithStore(st),
		WithPacing(), WithDegraded(DegradedConfig{NoHoldBack: true}), WithLogger(discard),
		WithObserver(tee{m, rec}))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := tr.Reserve(context.Background(), "k", 1); err != nil {
		t.Fatal(err)
	}
	gauge := func(want string) {
		t.Helper()
		exp := "# HELP ratemonitor_degraded " + degradedHelp(t, reg) + "\n# TYPE ratemonitor_degraded gauge\nratemonitor_degraded{store=\"redis\"} " + want + "\n"
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

// tee gives each event to both observers.
type tee [2]observe.Observer

func (o tee) Observe(e observe.Event) { o[0].Observe(e); o[1].Observe(e) }

// degradedHelp returns the degraded gauge's help text as registered.
func degradedHelp(t *testing.T, reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ratemonitor_degraded" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no ratemonitor_degraded metric registered")
	return ""
}
