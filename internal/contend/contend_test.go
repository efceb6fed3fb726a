package contend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errContended = fmt.Errorf("%w: test", cache.ErrContended)

// TestRetryRepeatsOnlyContention: contention is tried again until op stops contending (the
// fourth call here) and that result is returned; another error is returned as it is, at once; a
// first error that is not contention is returned without calling op.
func TestRetryRepeatsOnlyContention(t *testing.T) {
	calls := 0
	v, err := Retry(context.Background(), errContended, func() (int, error) {
		if calls++; calls < 4 {
			return 0, errContended
		}
		return 42, nil
	})
	if v != 42 || err != nil || calls != 4 {
		t.Errorf("Retry = %d, %v after %d calls; want 42, nil after 4", v, err, calls)
	}
	down := errors.New("down")
	calls = 0
	_, err = Retry(context.Background(), errContended, func() (int, error) { calls++; return 0, down })
	if err != down || calls != 1 {
		t.Errorf("Retry = %v after %d calls; want the store's error after 1", err, calls)
	}
	calls = 0
	_, err = Retry(context.Background(), down, func() (int, error) { calls++; return 0, nil })
	if err != down || calls != 0 {
		t.Errorf("Retry = %v after %d calls; want the first error, op not called", err, calls)
	}
}

// TestRetryGivesUpAtTheDeadlineWrappingBoth: contention that lasts past the context's deadline
// returns, once the context has ended (not before), an error wrapping context.DeadlineExceeded
// and the contention; so too when the deadline passes during a try, which then fails with the
// context's error.
func TestRetryGivesUpAtTheDeadlineWrappingBoth(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(map[bool]string{false: "between tries", true: "during a try"}[during], func(t *testing.T) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := Retry(ctx, errContended, func() (int, error) {
				if during && time.Since(start) > 40*time.Millisecond {
					<-ctx.Done()
					return 0, fmt.Errorf("store read: %w", ctx.Err())
				}
				return 0, errContended
			})
			ended := ctx.Err() // the context's own word, not a measure of the time passed
			cancel()
			if took := time.Since(start); ended == nil || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, cache.ErrContended) {
				t.Errorf("during a try %v: err %v after %v; want one wrapping DeadlineExceeded and ErrContended, at 50 ms", during, err, took)
			}
		})
	}
}

// TestTurnsSerialiseAKeyAndHoldNothingAfter: 16 goroutines × 100 increments of one unguarded
// counter under a key's turn lose none; the turns are dropped once nobody holds them; a context
// that ends while waiting returns its error and holds nothing.
func TestTurnsSerialiseAKeyAndHoldNothingAfter(t *testing.T) {
	var ts Turns
	n := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				leave, err := ts.Take(context.Background(), "k")
				if err != nil {
					t.Error(err)
					return
				}
				n++
				leave()
			}
		})
	}
	wg.Wait()
	if n != 1600 || len(ts.keys) != 0 {
		t.Errorf("counted %d, %d keys held; want 1600, 0", n, len(ts.keys))
	}
	leave, _ := ts.Take(context.Background(), "k")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if l2, err := ts.Take(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) || l2 != nil {
		t.Errorf("Take while held = %v; want DeadlineExceeded", err)
	}
	if l3, err := ts.Take(context.Background(), "other"); err != nil {
		t.Errorf("another key: %v", err)
	} else {
		l3()
	}
	leave()
	if len(ts.keys) != 0 {
		t.Errorf("%d keys held after all left, want 0", len(ts.keys))
	}
}
