package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// refusalText is New's error for a server at addr with maxmemory 2 MiB under policy.
func refusalText(addr, policy string) string { return refusalTextOf(addr, 2<<20, policy) }

// refusalTextOf is New's error for a server at addr with maxmemory bytes under policy.
func refusalTextOf(addr string, maxmemory int, policy string) string {
	return fmt.Sprintf("ratemonitor: redis store: redis at %s has maxmemory %d bytes and maxmemory-policy %s, so it evicts keys when full, "+
		"this store's among them (each has a TTL, so volatile-* policies pick them too), and an evicted key's counts start again from zero: "+
		"run `CONFIG SET maxmemory-policy noeviction` on it (and set it in its config file), "+
		"or set Options.AllowEviction: true to accept the risk (evictions are then reported as StateLost events)", addr, maxmemory, policy)
}

// TestNewRefusesEvictingPolicy: New refuses allkeys-lru and volatile-lru with maxmemory set, with the
// exact error; accepts noeviction, maxmemory 0 under allkeys-lru, and AllowEviction.
func TestNewRefusesEvictingPolicy(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", policy)
		st, err := New(srv.Client(), Options{Timeout: 5 * time.Second})
		if err == nil {
			st.Close()
			t.Fatalf("%s: New accepted", policy)
		}
		if got, want := err.Error(), refusalText(srv.Addr, policy); got != want {
			t.Errorf("%s: error\n%s\nwant\n%s", policy, got, want)
		}
		st, err = New(srv.Client(), Options{Timeout: 5 * time.Second, AllowEviction: true})
		if err != nil {
			t.Fatalf("%s with AllowEviction: %v", policy, err)
		}
		st.Close()
	}
	for _, args := range [][]string{
		{"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"},
		{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"},
	} {
		srv := redistest.StartWith(t, args...)
		st, err := New(srv.Client(), Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		st.Close()
	}
}

// TestEvictingPolicyAnsweredLaterFailsOperations: a store made while Redis is down is made; once Redis answers with
// an evicting policy, operations fail with New's refusal; once the policy is noeviction,
// they succeed again (checked at most once a second).
func TestEvictingPolicyAnsweredLaterFailsOperations(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	addr := srv.Addr
	srv.Stop()
	st := newStore(t, srv.Client(), Options{CheckInterval: -1})
	defer st.Close()
	if st.policy.state.Load() != policyPending {
		t.Fatalf("state %d after New with Redis down, want pending", st.policy.state.Load())
	}
	srv.Restart()
	s := mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute})
	ctx := context.Background()
	st.policy.next.Store(0) // do not wait out the once-a-second recheck
	// The operation starts the check in the background and goes on as the state was.
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatalf("Record that starts the check: %v", err)
	}
	waitFor(t, "the check", func() bool { return st.policy.state.Load() == policyRefused })
	err := st.Record(ctx, s, "k", 1)
	if err == nil || err.Error() != refusalText(addr, "allkeys-lru") {
		t.Fatalf("Record after Redis came back: %v", err)
	}
	if err := srv.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Record(ctx, s, "k", 1); err == nil || err.Error() != refusalText(addr, "allkeys-lru") {
		t.Fatalf("Record within a second of the last check: %v, want the refusal still", err)
	}
	st.policy.next.Store(0)
	if err := st.Record(ctx, s, "k", 1); err == nil || err.Error() != refusalText(addr, "allkeys-lru") {
		t.Fatalf("Record that starts the check: %v, want the refusal still", err)
	}
	waitFor(t, "the check", func() bool { return st.policy.state.Load() == policyOK })
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatalf("Record after the fix: %v", err)
	}
	if st.policy.state.Load() != policyOK {
		t.Fatalf("state %d, want ok", st.policy.state.Load())
	}
}

// TestEvictionPolicyReadFromInfoWithoutConfig: with CONFIG renamed away (as managed Redis does), the
// policy is read from INFO memory, and still refused.
func TestEvictionPolicyReadFromInfoWithoutConfig(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
	var re redis.Error
	if err := srv.Client().ConfigGet(context.Background(), "maxmemory").Err(); !errors.As(err, &re) {
		t.Fatalf("CONFIG GET on the renamed server: %v, want an error reply", err)
	}
	_, err := New(srv.Client(), Options{Timeout: 5 * time.Second})
	if err == nil || err.Error() != refusalText(srv.Addr, "allkeys-lru") {
		t.Fatalf("New: %v", err)
	}
}

// TestUnreadableEvictionPolicyAcceptedOnce: for a user who may run neither CONFIG nor INFO (an ACL, as
// managed Redis sets), the policy cannot be known; New accepts (and warns once) rather than
// refuse a server that may be fine, and operations work.
func TestUnreadableEvictionPolicyAcceptedOnce(t *testing.T) {
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-config", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "app", Password: "pw", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	if err := c.Info(ctx, "memory").Err(); err == nil {
		t.Fatal("INFO allowed")
	}
	st, err := New(c, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer st.Close()
	if st.policy.state.Load() != policyOK {
		t.Fatalf("state %d, want ok (unknowable)", st.policy.state.Load())
	}
	if err := st.Record(ctx, mustStrategy(t, strategy.Rule{Limit: 60, Window: time.Minute}), "k", 1); err != nil {
		t.Fatal(err)
	}
}
