package profiles_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// barrier is an upstream that holds each request until n have arrived (or 1 s has passed),
// so that how many the Transport lets out at once is counted exactly, without timing luck.
type barrier struct {
	n        int
	mu       sync.Mutex
	inFlight int
	maxIn    int
	arrived  int
	all      chan struct{}
	answer   func(i int, w http.ResponseWriter)
}

func newBarrier(n int, answer func(i int, w http.ResponseWriter)) *barrier {
	return &barrier{n: n, all: make(chan struct{}), answer: answer}
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.inFlight++
	b.maxIn = max(b.maxIn, b.inFlight)
	b.arrived++
	i := b.arrived
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-time.After(time.Second):
	}
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	b.answer(i, w)
}

// fire sends n requests at once through tr, and returns their statuses.
func fire(t *testing.T, tr http.RoundTripper, n int, mk func() *http.Request) []int {
	return fireOr(t, tr, n, mk, false)
}

// fireOr is fire; with waitErrs, a request the Transport does not send before its deadline (it
// would wait too long) has status 0 instead of failing the test. The deadline, 30 s, is what a
// request may take on a loaded machine (a barrier holds it up to 1 s); the Transport refuses at
// once a request whose wait is longer (GitHub's hour).
func fireOr(t *testing.T, tr http.RoundTripper, n int, mk func() *http.Request, waitErrs bool) []int {
	t.Helper()
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := tr.RoundTrip(mk().WithContext(ctx))
			if err != nil {
				if !waitErrs || !strings.Contains(err.Error(), "past the context's deadline") {
					t.Error(err)
				}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return statuses
}
