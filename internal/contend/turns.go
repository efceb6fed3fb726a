package contend

import (
	"context"
	"sync"
)

// Turns makes callers take turns per key, so that one process's callers do not race each
// other for a key's item in a store that contends: each waits for the one before it instead of
// losing a write to it. Waiters are served in about the order they came (a channel's queue of
// blocked senders). The zero Turns is ready for use; it is safe for concurrent use, and holds
// nothing for a key nobody holds or waits on.
type Turns struct {
	mu   sync.Mutex
	keys map[string]*turn
}

type turn struct {
	held chan struct{} // one token: sent to take the turn, received to give it back
	refs int           // holder and waiters, under Turns.mu
}

// Take waits for key's turn and returns the func that gives it back, which must be called
// once. When ctx ends first it returns ctx's error, and holds nothing.
func (ts *Turns) Take(ctx context.Context, key string) (func(), error) {
	ts.mu.Lock()
	if ts.keys == nil {
		ts.keys = map[string]*turn{}
	}
	tu := ts.keys[key]
	if tu == nil {
		tu = &turn{held: make(chan struct{}, 1)}
		ts.keys[key] = tu
	}
	tu.refs++
	ts.mu.Unlock()
	select {
	case tu.held <- struct{}{}:
		return func() {
			<-tu.held
			ts.done(key, tu)
		}, nil
	case <-ctx.Done():
		ts.done(key, tu)
		return nil, ctx.Err()
	}
}

// done drops one reference to key's turn, and the turn itself with the last one.
func (ts *Turns) done(key string, tu *turn) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tu.refs--; tu.refs == 0 {
		delete(ts.keys, key)
	}
}
