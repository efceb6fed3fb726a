package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The eviction-policy check (issue 14, defect 4). Every key the store writes has a TTL, so
// under maxmemory every policy but noeviction may evict it (allkeys-* pick among all keys,
// volatile-* among keys with a TTL: ours), and an evicted key's counts start again from zero
// without an error. So New refuses such a server unless Options.AllowEviction is set.
//
// Outcomes of the check, per server:
//   - maxmemory 0 (no limit: Redis never evicts, whatever the policy; on a 64-bit build) or
//     policy noeviction: accepted.
//   - another policy with maxmemory set: refused, unless AllowEviction.
//   - CONFIG GET refused (managed Redis often renames CONFIG): the same two settings are read
//     from INFO memory (maxmemory, maxmemory_policy); when that is refused too, the store
//     logs one slog warning and goes on: it cannot know, and the loss monitor still reports
//     what INFO stats shows.
//   - the server unreachable (a process started during an outage): New does not fail; it
//     logs one slog warning, and the check runs again, at most once a second, before the
//     operations that follow, until one reaches every server. If that later check finds an
//     evicting policy, those operations fail with the error New would have returned, until
//     the policy is fixed (it is checked again at most once a second meanwhile).

// Policy states of a Store (policyGate.state).
const (
	policyOK      int32 = iota // checked and accepted, or not knowable (CONFIG and INFO refused)
	policyPending              // a server could not be reached: check again
	policyRefused              // an evicting policy without AllowEviction: operations fail
)

// policyRecheck is how often a pending or refused policy is checked again, at most.
const policyRecheck = time.Second

// policyGate holds the outcome of the eviction-policy check and runs it again while needed.
type policyGate struct {
	state atomic.Int32
	err   atomic.Pointer[error] // the refusal, while policyRefused
	next  atomic.Int64          // Unix ns before which no check runs again
	mu    sync.Mutex            // one check at a time
}

// policyOf is what one server said about eviction.
type policyOf struct {
	addr      string
	maxmemory int64 // bytes
	policy    string
	err       error // set when unknown: unreachable (reachErr) or refused (neither readable)
	unreached bool
}

// probePolicy reads maxmemory and maxmemory-policy of the server c reaches, in one round
// trip: CONFIG GET (Redis 2.0+) and INFO memory (whose maxmemory fields exist since 4.0) as
// the fallback when CONFIG is refused.
func probePolicy(ctx context.Context, c *redis.Client) policyOf {
	var mem, pol *redis.MapStringStringCmd
	var info *redis.StringCmd
	var ci *redis.ClientInfoCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		mem, pol = p.ConfigGet(ctx, "maxmemory"), p.ConfigGet(ctx, "maxmemory-policy")
		info = p.Info(ctx, "memory")
		ci = clientInfo(ctx, c, p)
		return nil
	})
	r := policyOf{addr: addrOf(c, ci)}
	if err != nil && !refused(err) {
		r.err, r.unreached = err, true
		return r
	}
	if mem.Err() == nil && pol.Err() == nil {
		if n, perr := strconv.ParseInt(mem.Val()["maxmemory"], 10, 64); perr == nil && pol.Val()["maxmemory-policy"] != "" {
			r.maxmemory, r.policy = n, pol.Val()["maxmemory-policy"]
			return r
		}
	}
	if info.Err() == nil {
		f := infoFields(info.Val())
		if n := intField(f, "maxmemory"); n >= 0 && f["maxmemory_policy"] != "" {
			r.maxmemory, r.policy = n, f["maxmemory_policy"]
			return r
		}
	}
	cerr := mem.Err()
	if cerr == nil {
		cerr = pol.Err()
	}
	r.err = fmt.Errorf("CONFIG GET: %v; INFO memory: %v", cerr, info.Err())
	return r
}

// evicts reports whether the server may evict the store's keys.
func (p policyOf) evicts() bool { return p.err == nil && p.maxmemory > 0 && p.policy != "noeviction" }

// refusal is the error for a server that evicts.
func (p policyOf) refusal() error {
	return fmt.Errorf("ratemonitor: redis store: redis at %s has maxmemory %d bytes and maxmemory-policy %s, so it evicts keys when full, "+
		"this store's among them (each has a TTL, so volatile-* policies pick them too), and an evicted key's counts start again from zero: "+
		"run `CONFIG SET maxmemory-policy noeviction` on it (and set it in its config file), "+
		"or set Options.AllowEviction: true to accept the risk (evictions are then reported as StateLost events)",
		p.addr, p.maxmemory, p.policy)
}

// checkPolicy asks every server (forEachMaster) and updates the gate. It returns the refusal,
// if any; warn says whether to log a server that could not be asked (once, at New).
func (st *Store) checkPolicy(ctx context.Context, warn bool) error {
	ctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	defer cancel()
	var mu sync.Mutex
	var got []policyOf
	err := forEachMaster(ctx, st.client, func(ctx context.Context, c *redis.Client) error {
		p := probePolicy(ctx, c)
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
		return p.err
	})
	slices.SortFunc(got, func(a, b policyOf) int { return strings.Compare(a.addr, b.addr) })
	g := &st.policy
	g.next.Store(time.Now().Add(policyRecheck).UnixNano())
	state := policyOK
	for _, p := range got {
		switch {
		case p.evicts() && !st.opts.AllowEviction:
			e := p.refusal()
			g.err.Store(&e)
			g.state.Store(policyRefused)
			return e
		case p.unreached:
			state = policyPending
			if warn {
				slog.Warn("ratemonitor: redis store: could not check the eviction policy of redis at "+p.addr+
					"; the store checks it again before the operations that reach it", "err", p.err)
			}
		case p.err != nil:
			slog.Warn("ratemonitor: redis store: cannot read the eviction policy of redis at "+p.addr+
				": make sure its maxmemory-policy is noeviction, or counts of evicted keys start again from zero "+
				"(the store reports evictions where INFO stats is readable)", "err", p.err)
		}
	}
	if err != nil && len(got) == 0 && !refused(err) {
		// The cluster's slot map could not be loaded: no server was asked.
		state = policyPending
		if warn {
			slog.Warn("ratemonitor: redis store: could not check the eviction policy of the cluster's masters; "+
				"the store checks it again before the operations that reach them", "err", err)
		}
	}
	g.state.Store(state)
	return nil
}

// gate is run by every operation: nil once the policy is accepted; while it is pending or
// refused, it checks again (at most once per policyRecheck, one caller at a time; the
// others go on as the state was) and returns the refusal, if any.
func (st *Store) gate(ctx context.Context) error {
	g := &st.policy
	if g.state.Load() == policyOK {
		return nil
	}
	if time.Now().UnixNano() >= g.next.Load() && g.mu.TryLock() {
		defer g.mu.Unlock()
		if time.Now().UnixNano() >= g.next.Load() {
			return st.checkPolicy(ctx, false)
		}
	}
	if g.state.Load() == policyRefused {
		return *g.err.Load()
	}
	return nil
}
