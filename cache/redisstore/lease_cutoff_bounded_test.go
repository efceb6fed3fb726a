package redisstore

import (
	"context"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCutOffReleasesBoundedInOutage: with the server down, every AcquireLease fails on a refused
// dial (nothing sent) and starts no release at all: 100 failed acquires leave no goroutine
// behind.
func TestCutOffReleasesBoundedInOutage(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{Timeout: 50 * time.Millisecond})
	defer st.Close()
	srv.Stop()
	before := runtime.NumGoroutine()
	for range 100 {
		st.AcquireLease(context.Background(), "k", 1, 30*time.Second)
	}
	if extra := runtime.NumGoroutine() - before; extra > 10 {
		t.Errorf("%d goroutines more after 100 acquires refused by a server that is down, want at most 10 (one releaser, not one per failure)", extra)
	}
}

// TestCutOffReleasesOneWorkerWhenServerHangs: a server that accepts connections and never
// answers: each AcquireLease times out after its script may have been sent, so each lease is
// queued for a background release, but one worker does them all: 50 failed acquires add at
// most 10 goroutines (the worker and the client's own), not 50, and Close ends the worker.
func TestCutOffReleasesOneWorkerWhenServerHangs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st := newStore(t, client, Options{Timeout: 20 * time.Millisecond})
	before := runtime.NumGoroutine()
	for range 50 {
		if _, err := st.AcquireLease(context.Background(), "k", 1, 30*time.Second); err == nil {
			t.Fatal("AcquireLease on a server that never answers succeeded")
		}
	}
	st.cutoffs.mu.Lock()
	queued := len(st.cutoffs.queue)
	st.cutoffs.mu.Unlock()
	extra := runtime.NumGoroutine() - before
	st.Close()
	if queued != 50 || extra > 10 {
		t.Errorf("after 50 acquires cut off by a server that never answers: %d leases queued for release, %d goroutines more; want 50 queued, at most 10 goroutines (one worker)", queued, extra)
	}
	st.cutoffs.mu.Lock()
	running := st.cutoffs.running
	st.cutoffs.mu.Unlock()
	if running {
		t.Error("the release worker still runs after Close")
	}
}
