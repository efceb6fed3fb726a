package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// TestNewRefusesReplays: New refuses every client kind whose settings retry commands (the
// Ring's and the Sentinel client's defaults among them), naming the setting to change, and
// accepts each with MaxRetries: -1, a Cluster client with its default MaxRedirects included.
func TestNewRefusesReplays(t *testing.T) {
	addr := "127.0.0.1:1" // nothing listens: New's eviction-policy check is left for later
	kinds := []struct {
		name string
		bad  redis.UniversalClient
		good redis.UniversalClient
	}{
		{"Client", redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 2, ContextTimeoutEnabled: true}),
			redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})},
		{"FailoverClient", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: true}),
			redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, MaxRetries: -1, ContextTimeoutEnabled: true})},
		{"ClusterClient", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: 2, ContextTimeoutEnabled: true}),
			redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})},
		{"Ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: true}),
			redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, MaxRetries: -1, ContextTimeoutEnabled: true})},
	}
	for _, k := range kinds {
		t.Cleanup(func() { k.bad.Close(); k.good.Close() })
		if _, err := New(k.bad, Options{}); err == nil || !strings.Contains(err.Error(), "set MaxRetries: -1") {
			t.Errorf("%s that retries: New says %v, want a refusal naming MaxRetries: -1", k.name, err)
		}
		st, err := New(k.good, Options{CheckInterval: -1})
		if err != nil {
			t.Errorf("%s with MaxRetries: -1: %v", k.name, err)
			continue
		}
		st.Close()
	}
}

// TestLostReplyCountsOnceThroughRing: through a Ring (one shard), a Record whose reply is lost after the
// script ran fails and counts once.
func TestLostReplyCountsOnceThroughRing(t *testing.T) {
	srv := redistest.Start(t)
	e := &replyEater{}
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}, MaxRetries: -1,
		ContextTimeoutEnabled: true, DialerRetries: 1, Dialer: e.dial})
	t.Cleanup(func() { r.Close() })
	st, err := New(r, Options{Timeout: 2 * time.Second, CheckInterval: -1}) // no monitor: its heartbeat is a script too
	if err != nil {
		t.Fatal(err)
	}
	checkLostReply(t, st, e, "lost-ring", "")
}
