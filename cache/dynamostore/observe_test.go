package dynamostore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestObserverRetryAndStoreErrorEvents forces conditional-check failures and checks the Retry and
// StoreError events exactly, beside Stats.
func TestObserverRetryAndStoreErrorEvents(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	rec := &observetest.Recorder{}
	st := newStore(t, c, Options{Clock: clk, MaxRetries: 2, Observer: rec})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 10, Window: 10 * time.Second}))
	ctx := context.Background()
	interfere := func(attempts int) {
		st.beforeWrite = func(attempt int) {
			if attempt < attempts {
				if err := other.Record(ctx, s, "k", 1); err != nil {
					t.Error(err)
				}
			}
		}
	}
	check := func(want ...string) {
		t.Helper()
		if got := rec.Strings(); !slices.Equal(got, want) {
			t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		rec.Reset()
	}
	interfere(0)
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	check()
	interfere(1) // the first write fails, the retry succeeds
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	check("retry store=dynamodb op=admit key=k n=1")
	interfere(3) // all three attempts fail: two retries, then ErrContended
	_, err := st.Reserve(ctx, s, "k", 1)
	if !errors.Is(err, ErrContended) {
		t.Fatal(err)
	}
	check("retry store=dynamodb op=reserve key=k n=1", "retry store=dynamodb op=reserve key=k n=2",
		"store_error store=dynamodb op=reserve key=k err="+err.Error())
	if got := st.Stats(); got.Retries != 3 || got.Contended != 1 {
		t.Fatalf("stats %+v", got)
	}
	interfere(0)
	st.Close()
	st.Record(ctx, s, "k", 1)
	check("store_error store=dynamodb op=record key=k err=" + cache.ErrClosed.Error())
}
