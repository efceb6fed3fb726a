package dynamostore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestContentionAdmitsExactlyLimit: 2 stores (separate clients) × 16 goroutines on one key, for
// each strategy; admitted exact, ErrContended records nothing, stats consistent.
func TestContentionAdmitsExactlyLimit(t *testing.T) {
	srv, c1 := server(t)
	c2 := dynalite.NewClient(srv.Endpoint)
	clk := clock.NewManual(t0.Add(7 * time.Second))
	ctx := context.Background()
	cases := []struct {
		name string
		s    *engine.Strategy
		lim  int
	}{
		{"tb", must(tokenbucket.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour})), 200},
		{"fw", must(fixedwindow.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour})), 200},
		{"rw", must(rollingwindow.New(strategy.Rule{Limit: 300, Window: time.Hour}, strategy.Rule{Limit: 200, Window: 24 * time.Hour, Granularity: time.Minute})), 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stores := []*Store{newStore(t, c1, Options{Clock: clk}), newStore(t, c2, Options{Clock: clk})}
			a, r, k := hammer(t, stores, 32, 40, tc.s, "hot-"+tc.name)
			s1, s2 := stores[0].Stats(), stores[1].Stats()
			t.Logf("admitted %d refused %d contended %d; stats %+v %+v", a, r, k, s1, s2)
			if a != int64(tc.lim) {
				t.Errorf("admitted %d, want %d", a, tc.lim)
			}
			if s1.Accepted+s2.Accepted != a || s1.Rejected+s2.Rejected != r || s1.Contended+s2.Contended != k {
				t.Errorf("stats disagree")
			}
			snap, err := stores[0].Peek(ctx, tc.s, "hot-"+tc.name, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := a
			if tc.name == "fw" {
				want = a + r // refused counted, contended not
			}
			if int64(snap.Usage[1].Used) != want {
				t.Errorf("used %d, want %d", snap.Usage[1].Used, want)
			}
		})
	}
}

// TestFixedWindowBoundaryNeverContends: 16 writers on one fixed-window key over two stores, a new
// window each of 5 rounds: under a limit of a million no admission returns ErrContended. The
// writers that fall into the versioned fallback at a window's start go back to the ADD (they
// used to stay in the fallback and fail with ErrContended).
func TestFixedWindowBoundaryNeverContends(t *testing.T) {
	srv, c1 := server(t)
	c2 := dynalite.NewClient(srv.Endpoint)
	clk := clock.NewManual(t0)
	ctx := context.Background()
	s := must(fixedwindow.New(strategy.Rule{Limit: 1_000_000, Window: time.Minute}))
	stores := []*Store{newStore(t, c1, Options{Clock: clk}), newStore(t, c2, Options{Clock: clk})}
	var contended, ok atomic.Int64
	for round := range 5 {
		clk.Set(t0.Add(time.Duration(round) * time.Minute)) // a new window each round
		var wg sync.WaitGroup
		for g := range 16 {
			st := stores[g%2]
			wg.Go(func() {
				for range 10 {
					_, err := st.Admit(ctx, s, "boundary", 1)
					switch {
					case errors.Is(err, ErrContended):
						contended.Add(1)
					case err != nil:
						t.Error(err)
					default:
						ok.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	t.Logf("ok %d contended %d; stats %+v %+v", ok.Load(), contended.Load(), stores[0].Stats(), stores[1].Stats())
	if contended.Load() > 0 {
		t.Errorf("%d of %d admissions under a limit of 1 000 000 returned ErrContended: the fallback never retries the ADD", contended.Load(), ok.Load()+contended.Load())
	}
}

// TestConcurrentConsumesSpendExactlyBucket: 16 goroutines × 125 consumes of one token on one bucket
// of 250 tokens, on a clock that does not move (no refill). Exactly 250 are admitted; every other
// consume is refused or returns ErrContended, and the bucket ends empty, never below. (Four times
// as many took a minute of CI under -race and found nothing more: every consume after the 250th
// meets the same full bucket.)
func TestConcurrentConsumesSpendExactlyBucket(t *testing.T) {
	_, c := server(t)
	clk := clock.NewManual(t0)
	st := newStore(t, c, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 250, Window: time.Hour}))
	a, r, k := hammer(t, []*Store{st}, 16, 125, s, "hot")
	t.Logf("admitted %d, refused %d, contended %d; stats %+v", a, r, k, st.Stats())
	if a+r+k != 2000 || a != 250 {
		t.Fatalf("admitted %d + refused %d + contended %d: want 250 admitted of 2000", a, r, k)
	}
	b := getItem(t, c, "hot")["tb:250:3600000000000"].(*types.AttributeValueMemberM).Value
	if debt, tokens := n(t, b, "debt"), n(t, b, "tokens"); debt != "900000000000000" || tokens != "0" {
		t.Fatalf("bucket after: debt %s, tokens %s; want empty (250 × 1 h)", debt, tokens)
	}
	if u := storetest.Used(t, st, s, "hot"); u[0] != 250 {
		t.Fatalf("used %v", u)
	}
	stats := st.Stats()
	if stats.Accepted != a || stats.Rejected != r || stats.Contended != k ||
		stats.ConditionalCheckFailures != stats.Retries+stats.Contended || stats.Retries < 0 {
		t.Fatalf("stats %+v disagree with the counts", stats)
	}
}

// hammer runs goroutines × per admissions of one request on key, spread over stores, and
// returns how many were admitted, refused and contended.
func hammer(t *testing.T, stores []*Store, goroutines, per int, s *engine.Strategy, key string) (admitted, refused, contended int64) {
	t.Helper()
	var a, r, k atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		st := stores[g%len(stores)]
		wg.Go(func() {
			for range per {
				d, err := st.Admit(context.Background(), s, key, 1)
				switch {
				case errors.Is(err, ErrContended):
					k.Add(1)
				case err != nil:
					t.Error(err)
					return
				case d.Allowed:
					a.Add(1)
				default:
					r.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return a.Load(), r.Load(), k.Load()
}
