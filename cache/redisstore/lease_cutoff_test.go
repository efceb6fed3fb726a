package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
)

// TestCutOffReleaseBeforeAcquireBuriesID: the release of a cut-off acquire (op 4) can reach
// the server before the acquire's script runs (two connections): the acquire of that id then
// takes nothing, the key's set stays empty, and the tombstone goes after the TTL, when the
// same id would be taken again.
func TestCutOffReleaseBeforeAcquireBuriesID(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	st := newStore(t, srv.Client(), Options{Clock: clk})
	ctx := context.Background()
	const ttl = time.Second
	if _, err := st.lease(ctx, "release cut-off lease", "k", 4, "cut-1", 1, ttl); err != nil {
		t.Fatal(err)
	}
	r, err := st.lease(ctx, "acquire lease", "k", 1, "cut-1", 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if r[0] != 0 || r[1] != 0 {
		t.Errorf("acquire of a buried id: ok %d held %d, want 0 0", r[0], r[1])
	}
	if n := srv.Client().ZCard(ctx, st.LeaseKey("k")).Val(); n != 0 {
		t.Errorf("ZCARD of the lease set = %d, want 0", n)
	}
	l, err := st.AcquireLease(ctx, "k", 1, ttl)
	if err != nil || !l.Acquired() || l.Held != 1 {
		t.Errorf("a fresh acquire beside the tombstone: %+v %v, want taken, held 1", l, err)
	}
	st.ReleaseLease(ctx, "k", l.ID)
	clk.Set(t0.Add(ttl))
	r, err = st.lease(ctx, "acquire lease", "k", 1, "cut-1", 1, ttl)
	if err != nil || r[0] != 1 {
		t.Errorf("acquire of the id once its tombstone went (ttl later): %v %v, want taken", r, err)
	}
}
