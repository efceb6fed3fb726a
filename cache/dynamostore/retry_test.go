package dynamostore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestRetriesAndStatsExact makes another writer change the item between each read and write, and
// checks the retries, ErrContended and every counter exactly.
func TestRetriesAndStatsExact(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk, MaxRetries: 2})
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
	want := func(w Stats) {
		t.Helper()
		if got := st.Stats(); got != w {
			t.Fatalf("stats %+v, want %+v", got, w)
		}
	}
	interfere(0)
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	want(Stats{Accepted: 1})
	interfere(1) // the first write fails, the retry succeeds
	if d, err := st.Admit(ctx, s, "k", 1); err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	want(Stats{Accepted: 2, ConditionalCheckFailures: 1, Retries: 1})
	interfere(3) // all three attempts (1 + MaxRetries) fail
	if _, err := st.Reserve(ctx, s, "k", 1); !errors.Is(err, ErrContended) || !strings.Contains(err.Error(), "3 attempts") {
		t.Fatalf("err = %v, want ErrContended after 3 attempts", err)
	}
	want(Stats{Accepted: 2, ConditionalCheckFailures: 4, Retries: 3, Contended: 1})
	// Nothing was spent by the contended call: 2 admitted here, 1 + 3 recorded by other.
	if u := storetest.Used(t, st, s, "k"); u[0] != 6 {
		t.Fatalf("used %v, want 6", u)
	}
	interfere(0)
	if d, _ := st.Admit(ctx, s, "k", 5); d.Allowed {
		t.Fatal("5 fitted in 4 tokens")
	}
	want(Stats{Accepted: 2, Rejected: 1, ConditionalCheckFailures: 4, Retries: 3, Contended: 1})
	// No retries at all when MaxRetries < 0.
	st0 := newStore(t, c, Options{Clock: clk, MaxRetries: -1})
	st0.beforeWrite = func(int) { other.Record(ctx, s, "k", 1) }
	if err := st0.Record(ctx, s, "k", 1); !errors.Is(err, ErrContended) {
		t.Fatalf("err = %v", err)
	}
	if got := st0.Stats(); got != (Stats{ConditionalCheckFailures: 1, Contended: 1}) {
		t.Fatalf("stats %+v", got)
	}
}

// TestCancelMidRetryReturnsItsError: a context cancelled during the jitter returns its error,
// records nothing and leaves no goroutine or timer. It returns within 30 s: a few milliseconds
// idle; not cancelled, the 50 retries would run on, and then the error would not be the
// context's nor the count 3.
func TestCancelMidRetryReturnsItsError(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	st := newStore(t, c, Options{Clock: clk, RetryBackoff: time.Hour, MaxRetries: 50})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 100, Window: time.Hour}))
	ctx, cancel := context.WithCancel(context.Background())
	st.beforeWrite = func(attempt int) {
		other.Record(context.Background(), s, "k", 1)
		if attempt == 2 {
			time.AfterFunc(5*time.Millisecond, cancel)
		}
	}
	start := time.Now()
	_, err := st.Admit(ctx, s, "k", 1)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 30*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	if u, _ := other.Peek(context.Background(), s, "k", 0); u.Usage[0].Used != 3 {
		t.Errorf("used %d, want the 3 of other", u.Usage[0].Used)
	}
	t.Logf("stats %+v", st.Stats())
	if s := st.Stats(); s.ConditionalCheckFailures != s.Retries+s.Contended {
		t.Errorf("stats %+v", s)
	}
}

// TestBackoffOverflowNeverPanics: with a RetryBackoff of 3 h and 25 retries, RetryBackoff·2^k
// would overflow int64: the jitter is capped at 100 ms first, and never panics (rand.N did, on
// the negative bound).
func TestBackoffOverflowNeverPanics(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk, RetryBackoff: 3 * time.Hour, MaxRetries: 25})
	other := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 1000, Window: time.Hour}))
	ctx := context.Background()
	st.beforeWrite = func(int) { other.Record(ctx, s, "k", 1) }
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("panic: %v", r)
		}
	}()
	_, err := st.Admit(ctx, s, "k", 1)
	t.Log(err)
}
