package cache

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
	"go.uber.org/goleak"
)

// TestClosedStoreRefusesOperations: Close is idempotent, every operation after it is ErrClosed,
// and no goroutine is left behind.
func TestClosedStoreRefusesOperations(t *testing.T) {
	m, err := NewMemory(MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := m.Record(context.Background(), s, "k", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close: %v", err)
	}
	if _, err := m.Peek(context.Background(), s, "k", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Peek after Close: %v", err)
	}
	if _, err := m.Reserve(context.Background(), nil, "k", 1); err == nil {
		t.Error("nil strategy accepted")
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

// TestCloseDuringUseNeverPanics: closing while other goroutines write neither panics nor deadlocks.
func TestCloseDuringUseNeverPanics(t *testing.T) {
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	for range 20 {
		m, err := NewMemory(MemoryConfig{MaxCost: 4 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 500 {
					err := m.Record(context.Background(), s, strconv.Itoa(g*1000+i), 1)
					if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFull) {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(time.Millisecond)
		m.Close()
		wg.Wait()
	}
}

// TestCloseDuringFastPathRefusesLaterOperations: goroutines hammer keys the store already holds
// (operations that take neither life nor a shard's lock) while Close runs: nothing panics
// (ristretto's channels are closed), every error is ErrClosed, and every operation that starts
// after Close returned gets ErrClosed.
func TestCloseDuringFastPathRefusesLaterOperations(t *testing.T) {
	s := mustStrategy(t, strategy.Rule{Limit: 1 << 20, Window: time.Minute})
	ctx := context.Background()
	for range 10 {
		m, err := NewMemory(MemoryConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 64 {
			if err := m.Record(ctx, s, strconv.Itoa(i), 1); err != nil {
				t.Fatal(err)
			}
		}
		var closed atomic.Bool
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					after := closed.Load()
					k := strconv.Itoa((g + i) % 64)
					var err error
					if i%2 == 0 {
						_, err = m.Reserve(ctx, s, k, 1)
					} else {
						err = m.Record(ctx, s, k, 1)
					}
					if err != nil && !errors.Is(err, ErrClosed) {
						t.Error(err)
						return
					}
					if after {
						if err == nil {
							t.Error("an operation begun after Close returned succeeded")
						}
						return
					}
				}
			})
		}
		time.Sleep(2 * time.Millisecond)
		m.Close()
		closed.Store(true)
		wg.Wait()
	}
}
