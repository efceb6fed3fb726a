package cache

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestObserverStoreErrors: every operation on a closed memory store is one StoreError event;
// the caller's own errors (a bad count) are not events.
func TestObserverStoreErrors(t *testing.T) {
	rec := &observe.Recorder{}
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
	m.Sync(ctx, s, "k", strategy.Update{Pause: time.Second})
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

// TestEvictionEventsAndQuietLog: a flood of keys into a tiny store gives one EvictedLive event
// per live eviction (as many as Stats counts), but at most one warning a second, each with
// the count since the last.
func TestEvictionEventsAndQuietLog(t *testing.T) {
	var logs syncBuffer
	var mu sync.Mutex
	events := 0
	obs := observe.Func(func(e observe.Event) {
		if e.Kind != observe.EvictedLive || e.Store != "memory" || e.Key == "" {
			t.Errorf("unexpected event %v", e)
		}
		mu.Lock()
		events++
		mu.Unlock()
	})
	m := newMemory(t, MemoryConfig{MaxCost: 8 << 10, MaxKeys: 100, Observer: obs,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	begin := time.Now()
	for i := range 2000 {
		m.Record(context.Background(), s, "k"+strconv.Itoa(i), 1)
	}
	m.client.Wait()
	elapsed := time.Since(begin)
	st := m.Stats()
	mu.Lock()
	got := events
	mu.Unlock()
	if st.EvictedLive == 0 || int64(got) != st.EvictedLive {
		t.Fatalf("%d events, Stats %+v: want one per live eviction, and some", got, st)
	}
	warnings := strings.Count(logs.String(), "level=WARN")
	if most := 1 + int(elapsed/evictionLogEvery); warnings < 1 || warnings > most {
		t.Fatalf("%d warnings for %d evictions in %v, want 1 to %d:\n%s", warnings, st.EvictedLive, elapsed, most, logs.String())
	}
	if !strings.Contains(logs.String(), "evicted=") || strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatalf("log:\n%s", logs.String())
	}
	t.Logf("%d live evictions, %d warnings", st.EvictedLive, warnings)
}
