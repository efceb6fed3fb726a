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
//     logs one slog warning, and the check runs again, at most once a second, in the
//     background (one at a time, never on an operation's time: the operation that starts it
//     goes on as the state was), until one reaches every server. If that later check finds
//     an evicting policy, operations fail with the error New would have returned, until the
//     policy is fixed (it is checked again at most once a second meanwhile).
//   - after New, the monitor (monitor.go) reads maxmemory and maxmemory_policy from the INFO
//     memory it fetches of every current master at each check, so a policy changed at run
//     time (CONFIG SET) or a master that took over (a failover, a Cluster's new master) is
//     seen within one Options.CheckInterval: an evicting one fails operations as above (and
//     logs one slog warning), unless AllowEviction is set; once every master answers with a
//     policy that does not evict, operations succeed again.

// Policy states of a Store (policyGate.state).
const (
	policyOK      int32 = iota // checked and accepted, or not knowable (CONFIG and INFO refused)
	policyPending              // a server could not be reached: check again
	policyRefused              // an evicting policy without AllowEviction: operations fail
)

// policyRecheck is how often a pending or refused policy is checked again, at most.
const policyRecheck = time.Second

// policyGate holds the outcome of the eviction-policy check and runs it again while needed.
// It is allocated apart from its Store, so that the monitor, which must not keep the Store
// alive (monitor.go), can update it.
type policyGate struct {
	allow bool                  // Options.AllowEviction
	state atomic.Int32          // policyOK, policyPending or policyRefused
	err   atomic.Pointer[error] // the refusal, while policyRefused
	next  atomic.Int64          // Unix ns before which the gate starts no check again
	mu    sync.Mutex            // held by the gate's background check, if one runs
	done  bool                  // under mu: Close was called, start no more checks

	setMu sync.Mutex
	last  time.Time // under setMu: when the check whose outcome the state is started
}

// set records a check's outcome, unless a check that started later already did (the gate's
// and the monitor's checks may overlap). It logs one warning when a check after New (warn)
// turns the state to refused.
func (g *policyGate) set(started time.Time, state int32, refusal error, warn bool) {
	g.setMu.Lock()
	defer g.setMu.Unlock()
	if started.Before(g.last) {
		return
	}
	g.last = started
	if state == policyRefused {
		g.err.Store(&refusal)
		if warn && g.state.Load() != policyRefused {
			slog.Warn("ratemonitor: redis store: operations fail until the eviction policy is fixed", "err", refusal)
		}
	}
	g.state.Store(state)
}

// stop waits for the gate's background check, if one runs, and starts no more.
func (g *policyGate) stop() {
	g.mu.Lock()
	g.done = true
	g.mu.Unlock()
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
	started := time.Now()
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
	g := st.policy
	g.next.Store(time.Now().Add(policyRecheck).UnixNano())
	state := policyOK
	for _, p := range got {
		switch {
		case p.evicts() && !st.opts.AllowEviction:
			e := p.refusal()
			g.set(started, policyRefused, e, !warn)
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
	g.set(started, state, nil, false)
	return nil
}

// gate is run by every operation: nil once the policy is accepted; while it is pending or
// refused, it starts the check again in the background (at most once per policyRecheck, one
// at a time, within Options.Timeout of its own) and returns the refusal, if any, as the
// state is: the operation never waits for the check, so it takes at most Options.Timeout.
func (st *Store) gate(context.Context) error {
	g := st.policy
	state := g.state.Load()
	if state == policyOK {
		return nil
	}
	if time.Now().UnixNano() >= g.next.Load() && g.mu.TryLock() {
		if g.done || time.Now().UnixNano() < g.next.Load() {
			g.mu.Unlock()
		} else {
			g.next.Store(time.Now().Add(policyRecheck).UnixNano())
			go func() {
				defer g.mu.Unlock() // sync.Mutex may be unlocked by another goroutine
				st.checkPolicy(context.Background(), false)
			}()
		}
	}
	if state == policyRefused {
		return *g.err.Load()
	}
	return nil
}
