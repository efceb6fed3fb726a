package redisstore

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestStoreErrorsObservedOncePerFailure: a closed store and a stopped Redis are StoreError events, one per
// failed operation; a context the caller cancelled is none.
func TestStoreErrorsObservedOncePerFailure(t *testing.T) {
	srv := redistest.Start(t)
	rec := &observetest.Recorder{}
	st := newStore(t, srv.Client(), Options{Observer: rec, Timeout: time.Second})
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	st.Record(cancelled, s, "k", 1)
	if got := rec.Strings(); len(got) != 0 {
		t.Fatalf("events %q", got)
	}
	srv.Stop()
	if err := st.Record(ctx, s, "k", 1); err == nil {
		t.Fatal("Record on a stopped Redis succeeded")
	}
	evs := rec.Events()
	if len(evs) != 1 || evs[0].Kind != observe.StoreError || evs[0].Store != "redis" || evs[0].Op != "record" ||
		evs[0].Key != "k" || !strings.Contains(evs[0].Err.Error(), "redis store") {
		t.Fatalf("events %q", rec.Strings())
	}
	rec.Reset()
	st.Close()
	st.Peek(ctx, s, "k", 1)
	if got, want := rec.Strings(), []string{"store_error store=redis op=peek key=k err=" + cache.ErrClosed.Error()}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
