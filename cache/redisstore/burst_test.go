package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestBurstBeyondPoolAnswersEveryAdmission: 1 024 admissions at once, far more than the client's 20 connections:
// every one is answered, and every token spent went to an admitted call. Before MaxInFlight,
// waiting for a connection used up the timeout and the connections of scripts cut off were
// thrown away: with a timeout of 250 ms all 1 024 failed. The timeout here is 1 s, as one round
// trip alone has taken over 250 ms on a loaded CI machine.
func TestBurstBeyondPoolAnswersEveryAdmission(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	st := newStore(t, client, Options{Timeout: time.Second})
	s, err := tokenbucket.New(strategy.Rule{Limit: 50_000, Window: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var allowed, failed atomic.Int64
	var first atomic.Value
	done := make(chan struct{}, 1024)
	for g := range 1024 {
		go func() {
			defer func() { done <- struct{}{} }()
			d, err := st.Admit(ctx, s, "burst-"+strconv.Itoa(g%8), 1)
			if err != nil {
				failed.Add(1)
				first.CompareAndSwap(nil, err.Error())
				return
			}
			if d.Allowed {
				allowed.Add(1)
			}
		}()
	}
	for range 1024 {
		<-done
	}
	spent := 0
	for k := range 8 {
		snap, err := newStore(t, client, Options{Timeout: 5 * time.Second}).Peek(ctx, s, "burst-"+strconv.Itoa(k), 0)
		if err != nil {
			t.Fatal(err)
		}
		spent += snap.Usage[0].Used
	}
	if failed.Load() != 0 || int64(spent) != allowed.Load() {
		t.Errorf("allowed %d, failed %d (first: %v), tokens spent %d", allowed.Load(), failed.Load(), first.Load(), spent)
	}
}
