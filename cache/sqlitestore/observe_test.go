package sqlitestore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestObserverOneStoreErrorPerClosedOp: each operation on a closed SQLite store is one StoreError
// event; a bad count or burst (the caller's error) is none.
func TestObserverOneStoreErrorPerClosedOp(t *testing.T) {
	rec := &observetest.Recorder{}
	st, _ := open(t, Options{Observer: rec})
	s := must(fixedwindow.New(strategy.Rule{Limit: 5, Window: time.Minute}))
	ctx := context.Background()
	if _, err := st.Admit(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	st.Record(ctx, s, "k", 0)
	st.Admit(ctx, s, "k", 6)
	st.Close()
	st.Record(ctx, s, "k", 1)
	st.Reserve(ctx, s, "k", 1)
	st.Admit(ctx, s, "k", 1)
	st.Release(ctx, s, "k", time.Now(), 1)
	st.Peek(ctx, s, "k", 1)
	var want []string
	for _, op := range []string{"record", "reserve", "admit", "release", "peek"} {
		want = append(want, "store_error store=sqlite op="+op+" key=k err="+cache.ErrClosed.Error())
	}
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant %q", got, want)
	}
}
