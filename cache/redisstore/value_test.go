package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// value is a key's value decoded (state.lua's layout), for tests.
type value struct {
	magic         string // "rw", "fw" or "tb"
	ids           []string
	off, x, pu    int64
	slots         map[string][]int64    // per counter ID its record (rw: hw, total, nb, rr, ra, hl, hc, lo; fw: hw, k, c; tb: hw, q, r, s)
	buckets       map[string][][2]int64 // rolling window: per counter ID its buckets (latest, count), oldest first, the newest (hl, hc) last
	length, fixed int                   // bytes in all; bytes before the buckets
}

// decodeValue decodes v, or says why it cannot.
func decodeValue(v string) (value, error) {
	var out value
	if len(v) < 5 || v[2] != '1' {
		return out, fmt.Errorf("no layout 1 header in %q", v)
	}
	out.magic, out.length = v[:2], len(v)
	f := map[string]int{"rw": 8, "fw": 3, "tb": 4}[out.magic]
	if f == 0 {
		return out, fmt.Errorf("unknown magic %q", out.magic)
	}
	sl := int(binary.LittleEndian.Uint16([]byte(v[3:5])))
	if len(v) < 5+sl {
		return out, fmt.Errorf("truncated slot IDs")
	}
	if sl > 0 {
		out.ids = strings.Split(v[5:5+sl], ",")
	}
	rest := []byte(v[5+sl:])
	next := func() (int64, error) {
		if len(rest) < 8 {
			return 0, fmt.Errorf("truncated")
		}
		x := math.Float64frombits(binary.LittleEndian.Uint64(rest))
		rest = rest[8:]
		return int64(x), nil
	}
	var err error
	for _, p := range []*int64{&out.off, &out.x, &out.pu} {
		if *p, err = next(); err != nil {
			return out, err
		}
	}
	out.slots, out.buckets = map[string][]int64{}, map[string][][2]int64{}
	for _, id := range out.ids {
		rec := make([]int64, f)
		for i := range rec {
			if rec[i], err = next(); err != nil {
				return out, err
			}
		}
		out.slots[id] = rec
	}
	out.fixed = len(v) - len(rest)
	if out.magic == "rw" {
		for _, id := range out.ids {
			for range out.slots[id][2] {
				l, err1 := next()
				c, err2 := next()
				if err1 != nil || err2 != nil {
					return out, fmt.Errorf("truncated buckets")
				}
				out.buckets[id] = append(out.buckets[id], [2]int64{l, c})
			}
			if rec := out.slots[id]; rec[5] != -1<<53 {
				out.buckets[id] = append(out.buckets[id], [2]int64{rec[5], rec[6]})
			}
		}
	}
	if len(rest) != 0 {
		return out, fmt.Errorf("%d bytes left over", len(rest))
	}
	return out, nil
}

// readValue reads and decodes key's value under s; ok is false when the key is absent.
func readValue(t *testing.T, c *redis.Client, st *Store, s *engine.Strategy, key string) (v value, ok bool) {
	t.Helper()
	raw, err := c.Get(context.Background(), st.Keys(s, key)[0]).Result()
	if err == redis.Nil {
		return v, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if v, err = decodeValue(raw); err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	return v, true
}
