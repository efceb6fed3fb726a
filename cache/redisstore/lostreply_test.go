package redisstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// replyEater is a dialer whose connections, once armed, lose the reply to the next EVALSHA
// they send (the stores under test run no monitor, whose heartbeat is a script too): the connection waits until the server's reply has arrived (so the
// script ran), then closes and reports EOF, as a network failure after the write would.
type replyEater struct {
	armed atomic.Bool
	eaten atomic.Int32
}

func (e *replyEater) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &eatingConn{Conn: c, e: e}, nil
}

type eatingConn struct {
	net.Conn
	e    *replyEater
	mu   sync.Mutex
	drop bool // the reply to the script just written is to be lost
}

func (c *eatingConn) Write(p []byte) (int, error) {
	if c.e.armed.Load() && bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && c.e.armed.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.drop = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *eatingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	drop := c.drop
	c.mu.Unlock()
	if !drop {
		return c.Conn.Read(p)
	}
	// The reply arrives: the server ran the script. Throw it away with the connection.
	c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := c.Conn.Read(p)
	c.Conn.Close()
	if n > 0 {
		c.e.eaten.Add(1)
	}
	return 0, io.EOF
}

// lostReplyStrategy counts up to 1000 a minute: the case's Records are never refused.
func lostReplyStrategy(t testing.TB) *engine.Strategy {
	s, err := rollingwindow.New(strategy.Rule{Limit: 1000, Window: time.Minute, Granularity: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkLostReply Records 1 on key, arms e, Records 1 again and checks that this call fails
// (the reply was lost after the script ran, and it is not replayed), that the error names
// addr (if not ""), and that the key's count is exactly 2 (not 3). Then it checks that the next Record
// succeeds (count 3).
func checkLostReply(t *testing.T, st *Store, e *replyEater, key, addr string) {
	t.Helper()
	ctx := context.Background()
	s := lostReplyStrategy(t)
	// Count 1 first, which loads the script on the key's server (by way of NOSCRIPT and
	// EVAL), so that the reply lost is the run's, not NOSCRIPT's.
	if err := st.Record(ctx, s, key, 1); err != nil {
		t.Fatalf("warm-up Record: %v", err)
	}
	e.armed.Store(true)
	err := st.Record(ctx, s, key, 1)
	if e.armed.Load() {
		t.Fatalf("Record on %q: no EVALSHA went out on the dialer's connections", key)
	}
	if err == nil {
		t.Fatalf("Record on %q: nil error although its reply was lost; the script was replayed", key)
	}
	if e.eaten.Load() == 0 {
		t.Fatalf("Record on %q: %v, before any reply came back", key, err)
	}
	if want := " at " + addr + ":"; addr != "" && !strings.Contains(err.Error(), want) {
		t.Errorf("Record on %q: error %q does not name the server (%q)", key, err, want)
	}
	if strings.Contains(err.Error(), "FailoverClient") {
		t.Errorf("Record on %q: error %q names go-redis's placeholder, not the master", key, err)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("Record on %q: error %q does not wrap io.EOF", key, err)
	}
	used := func() int {
		snap, err := st.Peek(ctx, s, key, 0)
		if err != nil {
			t.Fatalf("Peek %q: %v", key, err)
		}
		return snap.Usage[0].Used
	}
	if got := used(); got != 2 {
		t.Fatalf("key %q counts %d after a Record and one whose reply was lost, want exactly 2 (3: replayed)", key, got)
	}
	if err := st.Record(ctx, s, key, 1); err != nil {
		t.Fatalf("the Record after: %v", err)
	}
	if got := used(); got != 3 {
		t.Fatalf("key %q counts %d after a third Record, want 3", key, got)
	}
}

// TestLostReplyCountsOnceOnSingleNode: on a single node, a Record whose reply is lost after the script ran
// fails, naming the server, and counts once.
func TestLostReplyCountsOnceOnSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	e := &replyEater{}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1, Dialer: e.dial})
	t.Cleanup(func() { c.Close() })
	st, err := New(c, Options{Timeout: 2 * time.Second, CheckInterval: -1}) // no monitor: its heartbeat is a script too
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		checkLostReply(t, st, e, "lost-single-"+string(rune('a'+i)), srv.Addr)
	}
}
