package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet size (cache.Traits.Processes). Each Store value, at each check of its monitor, writes a
// heartbeat into one sorted set, "prefix:{fleet}": its member is the Store's random ID and its
// score the instant (ms, Redis TIME) at which the entry expires, 3 check intervals later. The
// same script drops expired entries, keeps the set's TTL at least that long, and counts the
// rest. So each process's entry lasts by its own interval, processes may use different
// ones, and a process that died drops out within 3 of its intervals. Close removes the entry
// at once. Two Store values in one process over the same prefix count as two.

// beatLife is how many check intervals a heartbeat lasts.
const beatLife = 3

// heartbeatScript: KEYS[1] the fleet set, ARGV[1] the member, ARGV[2] its lifetime (ms).
// Returns how many entries are alive. It reads TIME before writing, which Redis 6.2+
// replicates as effects (the script's writes, not the script).
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + life, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
if redis.call('PTTL', KEYS[1]) < life then
  redis.call('PEXPIRE', KEYS[1], life)
end
return redis.call('ZCARD', KEYS[1])
`)

// fleet is a Store's heartbeat.
type fleet struct {
	key, id   string
	life      int64 // ms
	processes *atomic.Int64
}

func newFleet(prefix string, interval time.Duration) fleet {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	life := max(1, (beatLife * interval).Milliseconds())
	return fleet{key: prefix + ":{fleet}", id: hex.EncodeToString(b[:]), life: life, processes: new(atomic.Int64)}
}

// beat writes the heartbeat and keeps the count. Replaying it is harmless.
func (f fleet) beat(ctx context.Context, c redis.UniversalClient) error {
	n, err := heartbeatScript.Run(ctx, c, []string{f.key}, f.id, f.life).Int64()
	if err == nil {
		f.processes.Store(n)
	}
	return err
}

// Processes returns how many Store values (each a process, usually) wrote a
// heartbeat to this server and prefix within their last 3 check intervals, as the latest
// check saw (this one included); 0 before the first check has answered, or when
// Options.CheckInterval is negative.
func (st *Store) Processes() int {
	if st.mon == nil {
		return 0
	}
	return int(st.mon.fleet.processes.Load())
}

// closeMonitor stops the checks (the monitor's and the eviction-policy gate's), waiting for
// one in flight, and removes the heartbeat (best
// effort, within Options.Timeout: an entry left behind expires after 3 intervals).
func (st *Store) closeMonitor() {
	st.policy.stop() // the gate's background check too (evictpolicy.go)
	m := st.mon
	if m == nil {
		return
	}
	m.stop()
	if !m.beat.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	st.client.ZRem(ctx, m.fleet.key, m.fleet.id)
}
