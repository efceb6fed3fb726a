package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A script that may have run is never sent again (issue 14, defect 1). go-redis retries a
// command on EOF and timeouts in three loops that MaxRetries alone does not close:
// ClusterClient.process retries up to MaxRedirects (osscluster.go: `shouldRetry(lastErr, …) &&
// !cmd.NoRetry()`), Ring.process up to RingOptions.MaxRetries (ring.go: `|| cmd.NoRetry()`),
// and baseClient.process up to Options.MaxRetries (redis.go: `cmd.NoRetry() && !forced`, where
// forced means the connection was closed before the command was written). Each of them asks
// the command's NoRetry (Cmder, go-redis v9.23.0), so the store sends its scripts as commands
// that answer true: go-redis then still follows MOVED and ASK (the server refused the command
// before running it: ClusterClient.process redirects without asking NoRetry), and re-picks a
// node after READONLY (no write can happen on a replica), but returns every I/O error and
// timeout as it is. The store itself tries again only errors that say the script did not
// run (see notRun).

// noRetryCmd is a command go-redis must not send twice.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder: never retry, whatever the client's settings.
func (noRetryCmd) NoRetry() bool { return true }

// scripter is the redis.Scripter that redis.Script.Run is given: EVALSHA, and on NOSCRIPT
// EVAL (the EVALSHA did not run), each sent once as a noRetryCmd.
type scripter struct{ c redis.UniversalClient }

func (s scripter) send(ctx context.Context, name, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	_ = s.c.Process(ctx, noRetryCmd{cmd})
	return cmd
}

func (s scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.send(ctx, "eval", script, keys, args)
}

func (s scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.send(ctx, "evalsha", sha1, keys, args)
}

func (s scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.send(ctx, "eval_ro", script, keys, args)
}

func (s scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.send(ctx, "evalsha_ro", sha1, keys, args)
}

func (s scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.c.ScriptExists(ctx, hashes...)
}

func (s scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.c.ScriptLoad(ctx, script)
}

// notRun reports whether err is a reply by which Redis refused the command before running
// it, so that sending it again cannot count twice: TRYAGAIN (a multi-key command on a slot
// being migrated), CLUSTERDOWN, LOADING, MASTERDOWN (a replica without its master), READONLY
// (a replica: the script stops at its first write, having written nothing).
func notRun(err error) bool {
	for _, p := range []string{"TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// stale reports whether err suggests that the client's Cluster slot map is out of date: any
// failure that is not a Redis reply (connection refused or reset, EOF, a timeout: the master
// may be dead) but the caller's own cancellation, or a reply saying the slot moved or the node
// cannot serve it (MOVED, ASK, CLUSTERDOWN, READONLY, MASTERDOWN, LOADING).
func stale(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return !errors.Is(err, context.Canceled)
	}
	for _, p := range []string{"MOVED", "ASK", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "LOADING"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// reloadEvery bounds how often failures ask a Cluster client for a new slot map: go-redis
// reloads it by itself only every ClusterStateReloadInterval (60 s) and on MOVED, so after a
// master died the keys of its slots would fail until then (issue 14, defect 2).
const reloadEvery = 100 * time.Millisecond

// maxServers bounds the per-address turn budgets kept for a Cluster client; past it they start
// afresh (addresses churn only when nodes are replaced).
const maxServers = 1024

// route picks the server an operation goes to, holds the MaxInFlight budget of each server
// (each master of a Cluster, the one server otherwise: issue 14, defect 6), asks a Cluster
// client to reload its slot map after failures, and names the server in errors.
type route struct {
	client   redis.UniversalClient
	inFlight int
	turns    chan struct{} // the budget of a client that is not a Cluster client
	nodes    sync.Map      // Cluster master address → chan struct{}
	count    atomic.Int64  // entries in nodes
	reloaded atomic.Int64  // Unix ns of the last reload asked for
	dialed   *dialHook     // a Sentinel (failover) client's last master, else nil
}

// newRoute returns the route of a store over client, with inFlight turns per server. Over a
// Sentinel client it adds a dial hook to the client (AddHook, once per store) that records the
// address each new connection reached, the master's: go-redis's options hold only the
// placeholder "FailoverClient".
func newRoute(client redis.UniversalClient, inFlight int) *route {
	r := &route{client: client, inFlight: inFlight, turns: make(chan struct{}, inFlight)}
	if c, ok := client.(*redis.Client); ok && c.Options().Addr == failoverAddr { // servers.go
		r.dialed = &dialHook{}
		c.AddHook(r.dialed)
	}
	return r
}

// server is where one operation goes: its address ("" if unknown) and its budget.
type server struct {
	addr  string
	turns chan struct{}
}

// pick returns the server for key (the Redis key the script names first): for a Cluster
// client, the master serving its slot in the client's slot map (ClusterClient.MasterForKey,
// which loads the map when the client has none yet, bounded by ctx). An operation redirected
// (MOVED, ASK) still holds the turn of the master it was picked for.
func (r *route) pick(ctx context.Context, key string) (server, error) {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok {
		return server{addr: r.addr(), turns: r.turns}, nil
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		r.reload(err)
		return server{}, fmt.Errorf("no slot map from any of the cluster's nodes %s: %w", strings.Join(cc.Options().Addrs, ","), err)
	}
	addr := node.Options().Addr
	if t, ok := r.nodes.Load(addr); ok {
		return server{addr: addr, turns: t.(chan struct{})}, nil
	}
	if r.count.Add(1) > maxServers {
		r.nodes.Clear()
		r.count.Store(1)
	}
	t, _ := r.nodes.LoadOrStore(addr, make(chan struct{}, r.inFlight))
	return server{addr: addr, turns: t.(chan struct{})}, nil
}

// addr names a client's server that is not a Cluster client: a single node's address, the
// Sentinel master the client last connected to, or "" (a Ring or another kind).
func (r *route) addr() string {
	switch c := r.client.(type) {
	case *redis.Client:
		if r.dialed == nil {
			return c.Options().Addr
		}
		if a := r.dialed.addr.Load(); a != nil {
			return *a
		}
		return "the Sentinel master (not reached yet)"
	}
	return ""
}

// reload asks a Cluster client for a new slot map after a failure that suggests it is stale,
// at most every reloadEvery; ClusterClient.ReloadState does not block (go-redis reloads in a
// goroutine of its own, coalescing requests, osscluster.go LazyReload).
func (r *route) reload(err error) {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok || !stale(err) {
		return
	}
	now, last := time.Now().UnixNano(), r.reloaded.Load()
	if now-last < int64(reloadEvery) || !r.reloaded.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}

// dialHook records the remote address of the last connection a client made: for a Sentinel
// client, the master's (go-redis dials the master the sentinels name, sentinel.go
// masterReplicaDialer).
type dialHook struct{ addr atomic.Pointer[string] }

func (h *dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			a := conn.RemoteAddr().String()
			h.addr.Store(&a)
		}
		return conn, err
	}
}

func (h *dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// exec runs script for one operation (op on key; keys and args as the script takes them):
// it waits for a turn of the key's server (MaxInFlight, as long as ctx allows), then sends the
// script at most once within Options.Timeout, sending it again only after a reply that says it
// did not run (notRun), with a short pause, while the timeout allows. Failures are explained
// (which server, whose timeout) and reported to the observer.
func (st *Store) exec(ctx context.Context, op, key string, script *redis.Script, keys []string, args []any) ([]int64, error) {
	res, _, err := st.execSent(ctx, op, key, script, keys, args)
	return res, err
}

// execSent is exec, also saying, on failure, whether the script may have run on the server:
// false when it was never written to a connection (no slot map, no turn, the caller's context
// ended before, a refused dial, the client's pool full) or every reply said it did not run
// (notRun); true otherwise (an I/O error or a timeout after the write, another error reply).
func (st *Store) execSent(ctx context.Context, op, key string, script *redis.Script, keys []string, args []any) (res []int64, maybeSent bool, err error) {
	pickCtx, cancelPick := context.WithTimeout(ctx, st.opts.Timeout)
	srv, err := st.route.pick(pickCtx, keys[0])
	cancelPick()
	if err != nil {
		return nil, false, st.failed(ctx, op, key, fmt.Errorf("ratemonitor: redis store: %s on key %q: %w", op, key, err))
	}
	select {
	case srv.turns <- struct{}{}:
		defer func() { <-srv.turns }()
	case <-ctx.Done():
		return nil, false, fmt.Errorf("ratemonitor: redis store%s: %s on key %q: gave up waiting for a connection's turn (MaxInFlight %d): %w",
			atAddr(srv.addr), op, key, st.opts.MaxInFlight, ctx.Err())
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	defer cancel()
	start := time.Now()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if err := ctx.Err(); err != nil && !maybeSent {
			// ended before anything was written (a select may take the turn with ctx done)
			return nil, false, st.failed(parent, op, key, st.explain(parent, op, key, srv.addr, time.Since(start), err))
		}
		res, err := script.Run(ctx, scripter{st.client}, keys, args...).Int64Slice()
		if err == nil {
			return res, true, nil
		}
		maybeSent = maybeSent || !unsent(err)
		st.route.reload(err)
		if !notRun(err) {
			return nil, maybeSent, st.failed(parent, op, key, st.explain(parent, op, key, srv.addr, time.Since(start), err))
		}
		if sleep(ctx, pause) != nil {
			if callerBound(parent, ctx) {
				// The caller's deadline, not the store's timeout, leaves no time to try again.
				<-parent.Done()
			}
			return nil, maybeSent, st.failed(parent, op, key, st.explain(parent, op, key, srv.addr, time.Since(start), err))
		}
	}
}

// callerBound reports whether ctx, made from parent with the store's timeout, ends at parent's
// own deadline: then a call it ends or cuts short is ended by the caller, not by the store.
func callerBound(parent, ctx context.Context) bool {
	pd, ok := parent.Deadline()
	cd, _ := ctx.Deadline()
	return ok && !cd.Before(pd)
}

// unsent reports whether err says the command was never written to the server: a reply
// refusing it before it ran (notRun), a dial that failed (connection refused: net.OpError
// "dial"), or no connection free in the client's pool (redis.ErrPoolTimeout, redis.ErrClosed).
func unsent(err error) bool {
	if notRun(err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// sleep waits d, or returns ctx's error when it ends first (or would end within d).
func sleep(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// atAddr is " at <addr>" for error messages, or "".
func atAddr(addr string) string {
	if addr == "" {
		return ""
	}
	return " at " + addr
}
