package redisfleet

import (
	"testing"
	"time"
)

// TestStartClusterHasThreeMasters checks that a fresh cluster is healthy with three masters, quickly.
func TestStartClusterHasThreeMasters(t *testing.T) {
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster up in %v", time.Since(start))
	if m := c.Masters(); len(m) != 3 {
		t.Fatalf("masters %v, want 3", m)
	}
}

// TestSentinelFailoverAndKillPromoteOther checks that the set starts and that SENTINEL FAILOVER and a kill -9 of
// the master each promote the other server.
func TestSentinelFailoverAndKillPromoteOther(t *testing.T) {
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel up in %v", time.Since(start))
	m0 := s.Master()
	start = time.Now()
	from, to, _ := s.SentinelFailover()
	t.Logf("SENTINEL FAILOVER %s → %s in %v", from, to, time.Since(start))
	if from != m0 || to == m0 {
		t.Fatalf("failover %s → %s, want from %s", from, to, m0)
	}
	start = time.Now()
	from, to, _ = s.KillMaster()
	t.Logf("kill -9 %s → %s in %v", from, to, time.Since(start))
	if to != m0 {
		t.Fatalf("after the kill, master %s, want %s", to, m0)
	}
}
