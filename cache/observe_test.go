package cache

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestClosedStoreErrorsAreEvents: every operation on a closed memory store is one StoreError event;
// the caller's own errors (a bad count) are not events.
func TestClosedStoreErrorsAreEvents(t *testing.T) {
	rec := &observetest.Recorder{}
	m := newMemory(t, MemoryConfig{Observer: rec})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	if err := m.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := m.Record(ctx, s, "k", 0); err == nil {
		t.Fatal("count 0 accepted")
	}
	if got := rec.Strings(); len(got) != 0 {
		t.Fatalf("events before Close: %q", got)
	}
	m.Close()
	m.Record(ctx, s, "k", 1)
	m.Reserve(ctx, s, "k", 1)
	m.Admit(ctx, s, "k", 1)
	m.Release(ctx, s, "k", t0, 1)
	m.Peek(ctx, s, "k", 1)
	m.Sync(ctx, s, "k", engine.Update{Pause: time.Second})
	var want []string
	for _, op := range []string{"record", "reserve", "admit", "release", "peek", "sync"} {
		want = append(want, "store_error store=memory op="+op+" key=k err="+ErrClosed.Error())
	}
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant %q", got, want)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestEvictionEventsAndQuietLog: a flood of keys into a tiny store, none at its limit: no key
// is refused (the store makes room whatever ristretto's admission says), every key is either
// still counted or was evicted with one EvictedLive event (as many as Stats counts), and the
// log gets at most one warning a second, each with the count since the last.
func TestEvictionEventsAndQuietLog(t *testing.T) {
	var logs syncBuffer
	var mu sync.Mutex
	evicted := map[string]int{}
	obs := observe.Func(func(e observe.Event) {
		if e.Kind != observe.EvictedLive || e.Store != "memory" || e.Key == "" {
			t.Errorf("unexpected event %v", e)
		}
		mu.Lock()
		evicted[e.Key]++
		mu.Unlock()
	})
	m := newMemory(t, MemoryConfig{MaxCost: 8 << 10, MaxKeys: 100, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	const keys = 2000
	ctx := context.Background()
	begin := time.Now()
	for i := range keys {
		if err := m.Record(ctx, s, "k"+strconv.Itoa(i), 1); err != nil {
			t.Fatalf("key %d: %v (a key below its limit can always make room)", i, err)
		}
	}
	elapsed := time.Since(begin)
	mu.Lock()
	reported := maps.Clone(evicted)
	mu.Unlock()
	counted := 0
	for i := range keys {
		key := "k" + strconv.Itoa(i)
		switch u := used(t, m, s, key)[0]; {
		case u == 1 && reported[key] == 0:
			counted++
		case u == 0 && reported[key] == 1:
		default:
			t.Fatalf("%s: used %d, %d eviction events: want used 1 and none, or used 0 and one", key, u, reported[key])
		}
	}
	st := m.Stats()
	if st.Rejected != 0 || st.EvictedLive != int64(len(reported)) || counted+len(reported) != keys {
		t.Fatalf("stats %+v, %d keys evicted, %d counted: want none rejected, one event per live eviction, and all %d keys accounted for",
			st, len(reported), counted, keys)
	}
	if most := int64(8<<10) / int64(entryOverhead); int64(counted) > most || counted == 0 {
		t.Fatalf("%d keys counted in 8 KiB at more than %d bytes each, want 1 to %d", counted, entryOverhead, most)
	}
	warnings := strings.Count(logs.String(), "level=WARN")
	if most := 1 + int(elapsed/evictionLogEvery); warnings < 1 || warnings > most {
		t.Fatalf("%d warnings for %d evictions in %v, want 1 to %d:\n%s", warnings, st.EvictedLive, elapsed, most, logs.String())
	}
	if !strings.Contains(logs.String(), "evicted=") || strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatalf("log:\n%s", logs.String())
	}
	t.Logf("%d live evictions, %d keys counted, %d warnings", st.EvictedLive, counted, warnings)
}
