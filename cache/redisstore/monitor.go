package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/internal/lograte"
	"github.com/ratemonitor/ratemonitor/observe"
)

// defaultCheckInterval is Options.CheckInterval's default.
const defaultCheckInterval = time.Second

// minCheckInterval is the shortest Options.CheckInterval New accepts: each check is a few
// round trips to every master, and a heartbeat lasts 3 intervals, so a tinier one (1, meant
// as a second, is a nanosecond) keeps Redis busy answering checks back to back, and the
// heartbeats of Stores sharing a server expire before they see each other's.
const minCheckInterval = 100 * time.Millisecond

// checkInterval refuses a CheckInterval (after defaults) between 0 and minCheckInterval.
func checkInterval(d time.Duration) error {
	if d >= 0 && d < minCheckInterval {
		return fmt.Errorf("ratemonitor: redis store: CheckInterval %v is too short: give %v or more (the default, 0, is %v), or a negative one to turn the checks off", d, minCheckInterval, defaultCheckInterval)
	}
	return nil
}

// The loss monitor (issue 14, defect 4) and the fleet heartbeat. Each Store runs one check
// every CheckInterval, from New (the first at once) until Close. A check is a timer's
// callback, not a goroutine that waits: between checks no goroutine exists, so a Store that
// is never closed holds only a timer, which stops at the first check after its client is
// closed (go-redis answers redis.ErrClosed) or once the Store is garbage (runtime.AddCleanup).
//
// A check asks every server (forEachMaster) for INFO server, stats and memory in one pipeline
// (and, after a restart, for INFO persistence). INFO memory's maxmemory and maxmemory_policy
// (Redis 4.0+) update the eviction-policy gate (evictpolicy.go): a master that evicts fails
// operations unless AllowEviction. The rest is compared with what the previous check saw at
// the same address:
//   - run_id changed: the server restarted. Without persistence every count it held is gone;
//     with it (INFO persistence's rdb_last_load_keys_loaded, Redis 7.0+), the counts since its
//     last save. An observe.StateLost event with Op "restart".
//   - evicted_keys grew (Redis counts every key maxmemory evicted, since start or CONFIG
//     RESETSTAT): an observe.StateLost event with Op "eviction" and N the growth. Redis does
//     not say whose keys they were: some may be other applications'.
//
// An address seen for the first time (the first check, a new master after a failover) is
// only remembered. In a Cluster, a node restarted as a replica and promoted later has its
// master's data, yet counts as a restart at its address: the report errs on the side of
// telling. A check that fails (Redis down) changes nothing; the operations report outages.

// monitor is what a Store's checks need. It does not refer to the Store, so that a Store
// nobody holds can be collected and its checks stopped.
type monitor struct {
	client   redis.UniversalClient
	observer observe.Observer
	interval time.Duration
	timeout  time.Duration
	fleet    fleet
	policy   *policyGate // the Store's, updated from INFO memory

	seenMu   sync.Mutex
	seen     map[string]serverState // by address
	policies []policyOf             // of the check in flight

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	ctx     context.Context // cancelled by stop, so that a check in flight ends
	cancel  context.CancelFunc
	running sync.WaitGroup // the check in flight, if any
	beat    atomic.Bool    // a heartbeat was written (Close removes it)
}

// serverState is what a check saw of one server.
type serverState struct {
	runID   string
	evicted int64 // INFO stats evicted_keys
}

// startMonitor starts st's checks unless CheckInterval is negative.
func (st *Store) startMonitor() {
	if st.opts.CheckInterval < 0 {
		return
	}
	m := &monitor{client: st.client, observer: st.opts.Observer, interval: st.opts.CheckInterval,
		timeout: st.opts.Timeout, fleet: newFleet(st.opts.Prefix, st.opts.CheckInterval), policy: st.policy,
		seen: make(map[string]serverState)}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	st.mon = m
	m.mu.Lock()
	m.timer = time.AfterFunc(0, m.check)
	m.mu.Unlock()
	runtime.AddCleanup(st, func(m *monitor) { m.halt() }, m)
}

// halt stops the checks without waiting for one in flight, and reports whether they ran.
func (m *monitor) halt() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := !m.stopped
	m.stopped = true
	m.timer.Stop()
	m.cancel()
	return was
}

// stop stops the checks and waits for the one in flight to end.
func (m *monitor) stop() {
	m.halt()
	m.running.Wait()
}

// check runs once per interval on the timer's goroutine; checks never overlap, since the
// next is scheduled when one ends.
func (m *monitor) check() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.running.Add(1)
	m.mu.Unlock()
	defer m.running.Done()

	started := time.Now()
	m.seenMu.Lock()
	m.policies = m.policies[:0]
	m.seenMu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, m.timeout)
	err := forEachMaster(ctx, m.client, m.checkServer)
	cancel()
	m.setPolicy(started, err == nil)
	if !errors.Is(err, redis.ErrClosed) {
		ctx, cancel = context.WithTimeout(m.ctx, m.timeout)
		err = m.fleet.beat(ctx, m.client)
		cancel()
		if err == nil {
			m.beat.Store(true)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if errors.Is(err, redis.ErrClosed) {
		m.stopped = true // the client is closed: nothing will answer again
		m.cancel()
		return
	}
	if !m.stopped {
		m.timer.Reset(m.interval)
	}
}

// checkServer compares what c's server says now with what the previous check saw there, and
// reports a restart or evictions.
func (m *monitor) checkServer(ctx context.Context, c *redis.Client) error {
	var server, stats, memory *redis.StringCmd
	var ci *redis.ClientInfoCmd
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// Three INFO commands, not one with three sections: Redis before 7.0 takes one.
		server, stats, memory = p.Info(ctx, "server"), p.Info(ctx, "stats"), p.Info(ctx, "memory")
		ci = clientInfo(ctx, c, p)
		return nil
	}); err != nil {
		if server.Err() != nil || stats.Err() != nil {
			return errors.Join(server.Err(), stats.Err()) // unreachable, closed (redis.ErrClosed) or refused
		}
	}
	addr := addrOf(c, ci)
	mf := infoFields(memory.Val())
	pol := policyOf{addr: addr, maxmemory: intField(mf, "maxmemory"), policy: mf["maxmemory_policy"]}
	if pol.maxmemory < 0 || pol.policy == "" {
		pol.err = fmt.Errorf("INFO memory without maxmemory and maxmemory_policy: %v", memory.Err())
	}
	f := infoFields(server.Val(), stats.Val())
	now := serverState{runID: f["run_id"], evicted: intField(f, "evicted_keys")}
	m.seenMu.Lock()
	m.policies = append(m.policies, pol)
	if now.runID == "" || now.evicted < 0 {
		m.seenMu.Unlock()
		return nil // INFO without the fields (a proxy, say): nothing to compare
	}
	was, known := m.seen[addr]
	m.seen[addr] = now
	m.seenMu.Unlock()
	switch {
	case !known:
	case now.runID != was.runID:
		m.lost("restart", 0, fmt.Errorf("redis at %s restarted (run ID %s → %s): %s", addr, was.runID, now.runID, persistence(ctx, c)))
	case now.evicted > was.evicted:
		n := now.evicted - was.evicted
		m.lost("eviction", int(n), fmt.Errorf("redis at %s evicted %d keys (maxmemory is full); some may be this store's, whose counts start again from zero", addr, n))
	}
	return nil
}

// setPolicy updates the policy gate from the INFO memory of the check that started at
// started: refused while a master evicts (without AllowEviction); accepted once every master
// answered (all) with a policy that does not evict; else (a master unreachable or its policy
// unreadable) left as it was, for the gate's own check (evictpolicy.go) to settle.
func (m *monitor) setPolicy(started time.Time, all bool) {
	m.seenMu.Lock()
	got := slices.Clone(m.policies)
	m.seenMu.Unlock()
	slices.SortFunc(got, func(a, b policyOf) int { return strings.Compare(a.addr, b.addr) })
	for _, p := range got {
		if p.evicts() && !m.policy.allow {
			m.policy.set(started, policyRefused, p.refusal(), true)
			return
		}
		all = all && p.err == nil
	}
	if all && len(got) > 0 {
		m.policy.set(started, policyOK, nil, true)
	}
}

// persistence says what a restarted server kept, from INFO persistence.
func persistence(ctx context.Context, c *redis.Client) string {
	s, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return "the counts kept there are lost, at least those since its last save (INFO persistence: " + err.Error() + ")"
	}
	f := infoFields(s)
	if n := intField(f, "rdb_last_load_keys_loaded"); n > 0 {
		return fmt.Sprintf("it loaded %d keys from its persistence file (aof_enabled:%s), so the counts kept there since its last save are lost", n, f["aof_enabled"])
	}
	return "the counts kept there are lost (it loaded no persistence file)"
}

// lossLogs lets the process log one loss a second, whichever Store saw it: every Store over
// a restarted server sees the same restart.
var lossLogs lograte.Limiter

// lost reports a loss to the observer and, at most once a second, to slog.
func (m *monitor) lost(reason string, n int, err error) {
	if m.observer != nil {
		m.observer.Observe(observe.Event{Kind: observe.StateLost, Store: "redis", Op: reason, N: n, Err: err})
	}
	if ok, suppressed := lossLogs.Allow(time.Now()); ok {
		slog.Warn("ratemonitor: redis store: state lost", "reason", reason, "n", n, "err", err, "suppressed", suppressed)
	}
}
