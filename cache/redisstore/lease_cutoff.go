package redisstore

import (
	"context"
	"sync"
	"time"
)

// cutoffs are the background releases of leases whose AcquireLease failed after its script
// may have been sent (lease.go): a caller whose context ended while Redis was busy (a slow
// script, a fork, DEBUG SLEEP) gives up, but the server still runs the script when it gets to
// it and takes the lease, which nobody would hold or release: its slot would be lost for the
// whole TTL (30 s by default). The store knows the id it sent, so it releases it (lease.lua
// op 4, which also buries the id for the TTL in case the release runs first).
type cutoffs struct {
	mu     sync.Mutex
	ctx    context.Context // ended by Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// releaseCutOff releases lease id of key in the background, retrying with a growing pause
// (from Options.Timeout up to 1 s) until one release gets its reply, the lease's ttl has
// passed (it has expired by itself), or Close.
func (st *Store) releaseCutOff(key, id string, ttl time.Duration) {
	c := &st.cutoffs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || st.closed.Load() {
		return
	}
	if c.ctx == nil {
		c.ctx, c.stop = context.WithCancel(context.Background())
	}
	ctx, cancel := context.WithTimeout(c.ctx, ttl)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		for pause := st.opts.Timeout; ; pause = min(2*pause, time.Second) {
			if _, err := st.lease(ctx, "release cut-off lease", key, 4, id, 1, ttl); err == nil || ctx.Err() != nil {
				return
			}
			if sleep(ctx, pause) != nil {
				return
			}
		}
	}()
}

// closeCutOffs stops the background releases and waits for them (each is within its
// Options.Timeout round trip).
func (st *Store) closeCutOffs() {
	c := &st.cutoffs
	c.mu.Lock()
	c.closed = true
	stop := c.stop
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	c.wg.Wait()
}
