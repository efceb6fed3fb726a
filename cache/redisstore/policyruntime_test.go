package redisstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// syncBuffer is a bytes.Buffer safe for the slog handler's writes and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEvictingPolicySetAtRunTimeFailsOperations (regression, issue 14): a server accepted at New that turns
// evicting at run time (CONFIG SET maxmemory-policy allkeys-lru) fails operations with New's
// exact refusal within 2 check intervals, logs one warning, and once it is set back to
// noeviction operations succeed again within 2 intervals (on an idle machine; asserted
// within 20, as the checks run on the real clock). Before, the policy was checked at New
// only: operations went on succeeding. With AllowEviction, they never fail.
func TestEvictingPolicySetAtRunTimeFailsOperations(t *testing.T) {
	var logs syncBuffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	srv := redistest.StartWith(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	c := srv.Client()
	ctx := context.Background()
	const interval = minCheckInterval
	st := newStore(t, c, Options{CheckInterval: interval})
	defer st.Close()
	allowed := newStore(t, srv.Client(), Options{CheckInterval: interval, AllowEviction: true})
	defer allowed.Close()
	s := mustStrategy(t, strategy.Rule{Limit: 1_000_000, Window: time.Minute})
	if err := st.Record(ctx, s, "k", 1); err != nil {
		t.Fatal(err)
	}
	// until polls Record every 5 ms until ok says its error is the one wanted, for up to 20
	// intervals after since, and returns how long it took.
	until := func(what string, since time.Time, ok func(error) bool) time.Duration {
		t.Helper()
		for {
			err := st.Record(ctx, s, "k", 1)
			took := time.Since(since)
			if ok(err) {
				return took
			}
			if took > 20*interval {
				t.Fatalf("%s: not within 20 intervals (%v): Record: %v", what, 20*interval, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	want := refusalText(srv.Addr, "allkeys-lru")
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	took := until("refusal", time.Now(), func(err error) bool { return err != nil && err.Error() == want })
	t.Logf("refused %v after CONFIG SET allkeys-lru (interval %v)", took.Round(time.Millisecond), interval)
	time.Sleep(2 * interval) // more checks that find it evicting: still one warning
	if err := st.Record(ctx, s, "k", 1); err == nil || err.Error() != want {
		t.Fatalf("Record 2 intervals later: %v, want the refusal", err)
	}
	if err := allowed.Record(ctx, s, "k", 1); err != nil {
		t.Fatalf("Record with AllowEviction: %v", err)
	}
	if n := strings.Count(logs.String(), "operations fail until the eviction policy is fixed"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	took = until("success", time.Now(), func(err error) bool { return err == nil })
	t.Logf("succeeded %v after CONFIG SET noeviction", took.Round(time.Millisecond))
}
