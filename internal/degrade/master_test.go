package degrade

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

var (
	t0      = time.Unix(1_800_000_000, 0)
	discard = slog.New(slog.DiscardHandler)
)

// masterStore is a memory store reached through a Sentinel client as far as a Store can tell:
// master names the master it reached (SentinelMaster), "" when it cannot tell.
type masterStore struct {
	cache.Store
	master *atomic.Value // string
}

func newMasterStore(t *testing.T, clk clock.Clock) masterStore {
	t.Helper()
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	master := &atomic.Value{}
	master.Store("")
	return masterStore{Store: m, master: master}
}

func (o masterStore) SentinelMaster() string { return o.master.Load().(string) }

// TestDegradeMasterChangeReportsBothMasters: the Degraded event of a master change carries a
// masterChangedError naming both masters (degradetest's TestNewMasterGrantUnusedUntilHoldBack checks the
// behaviour over Redis, and the error's words).
func TestDegradeMasterChangeReportsBothMasters(t *testing.T) {
	clk := clock.NewManual(t0)
	st := newMasterStore(t, clk)
	st.master.Store("127.0.0.1:1")
	rec := &observetest.Recorder{}
	s, err := rollingwindow.New(strategy.Rule{Limit: 20, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	d := New(st, Config{ProbeInterval: 500 * time.Millisecond, Longest: s.Longest(), Clock: clk, Logger: discard, Observer: rec})
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	if res, err := d.Reserve(ctx, s, "k", 1); err != nil || !res.Allowed {
		t.Fatalf("first master: %+v, %v", res, err)
	}
	st.master.Store("127.0.0.1:2")
	if res, err := d.Reserve(ctx, s, "k", 1); err != nil || res.Allowed || res.Wait != time.Minute {
		t.Fatalf("new master: %+v, %v; want held back a minute", res, err)
	}
	evs := rec.Events()
	var mc masterChangedError
	if len(evs) != 1 || evs[0].Kind != observe.Degraded || !errors.As(evs[0].Err, &mc) || mc.from != "127.0.0.1:1" || mc.to != "127.0.0.1:2" {
		t.Errorf("events %v, want one Degraded with the change from 127.0.0.1:1 to 127.0.0.1:2", rec.Strings())
	}
}
