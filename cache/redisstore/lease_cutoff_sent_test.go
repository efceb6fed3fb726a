package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// TestCutOffReleaseOnlyWhenMaybeSent: an AcquireLease whose context has already ended never
// sends its script, so it starts no background release: 20 such calls leave no tombstone (a
// release writes one), and no lease.
func TestCutOffReleaseOnlyWhenMaybeSent(t *testing.T) {
	srv := redistest.Start(t)
	st := newStore(t, srv.Client(), Options{Timeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		if _, err := st.AcquireLease(ctx, "k", 1, time.Second); err == nil {
			t.Fatal("AcquireLease with an ended context succeeded")
		}
	}
	tomb := st.LeaseKey("k") + leaseTombMagic
	var n int64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = srv.Client().ZCard(context.Background(), tomb).Val(); n == 20 {
			break
		}
	}
	st.Close()
	if n != 0 {
		t.Errorf("%d tombstones (background releases) for 20 acquires whose context had ended before anything was sent, want 0", n)
	}
	if held := srv.Client().ZCard(context.Background(), st.LeaseKey("k")).Val(); held != 0 {
		t.Errorf("%d leases held after 20 acquires never sent, want 0", held)
	}
}
