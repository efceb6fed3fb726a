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
//
// One worker goroutine per store does them, from a queue of at most maxCutOffs leases (each
// once): in an outage every acquire fails, and a goroutine for each would pile up, each dialling
// the dead server until its lease's TTL. A lease that finds the queue full is left to its
// expiry (its slot is lost for the TTL: an over-count, never an under-count).
type cutoffs struct {
	mu      sync.Mutex
	ctx     context.Context // ended by Close
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closed  bool
	running bool // the worker runs
	queue   []cutOff
	queued  map[string]struct{} // ids in queue
}

// maxCutOffs bounds the leases waiting for their background release.
const maxCutOffs = 1024

// cutOff is one lease to release: id of key, given up on at until (its TTL has passed: it has
// expired by itself).
type cutOff struct {
	key, id string
	ttl     time.Duration
	until   time.Time
}

// releaseCutOff queues lease id of key for release in the background, and starts the worker if
// it does not run. The worker retries, with a growing pause (from Options.Timeout up to 1 s),
// until one release of the lease gets its reply, its ttl has passed, or Close.
func (st *Store) releaseCutOff(key, id string, ttl time.Duration) {
	c := &st.cutoffs
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || st.closed.Load() {
		return
	}
	if _, ok := c.queued[id]; ok || len(c.queue) >= maxCutOffs {
		return
	}
	if c.ctx == nil {
		c.ctx, c.stop = context.WithCancel(context.Background())
		c.queued = make(map[string]struct{})
	}
	c.queue = append(c.queue, cutOff{key: key, id: id, ttl: ttl, until: time.Now().Add(ttl)})
	c.queued[id] = struct{}{}
	if !c.running {
		c.running = true
		c.wg.Add(1)
		go st.releaseCutOffs(c.ctx)
	}
}

// releaseCutOffs is the worker: it releases the queued leases in order, and after a failure
// pauses before trying that lease again (a server down fails them all: one attempt per pause,
// not one per lease). It ends when the queue is empty, or at Close.
func (st *Store) releaseCutOffs(ctx context.Context) {
	c := &st.cutoffs
	defer c.wg.Done()
	pause := st.opts.Timeout
	for {
		c.mu.Lock()
		for len(c.queue) > 0 && !time.Now().Before(c.queue[0].until) {
			c.drop()
		}
		if len(c.queue) == 0 || ctx.Err() != nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		co := c.queue[0]
		c.mu.Unlock()
		rctx, cancel := context.WithDeadline(ctx, co.until)
		_, err := st.lease(rctx, "release cut-off lease", co.key, 4, co.id, 1, co.ttl)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.drop()
			c.mu.Unlock()
			pause = st.opts.Timeout
			continue
		}
		c.mu.Lock()
		if len(c.queue) > 0 && c.queue[0].id == co.id {
			// to the back: a lease that keeps failing (its key's set corrupt) holds up no other
			c.queue = append(c.queue[1:], co)
		}
		c.mu.Unlock()
		if sleep(ctx, pause) != nil {
			c.mu.Lock()
			c.running = false
			c.mu.Unlock()
			return
		}
		pause = min(2*pause, time.Second)
	}
}

// drop takes the first lease out of the queue; c.mu is held.
func (c *cutoffs) drop() {
	delete(c.queued, c.queue[0].id)
	c.queue[0] = cutOff{}
	c.queue = c.queue[1:]
}

// closeCutOffs stops the background releases and waits for the worker (within its
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
