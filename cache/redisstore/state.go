package redisstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The layout of a key's value (state.lua): one Redis string per logical key and algorithm,
// named "prefix:{k<base64 key>}:<magic><version>", so that values of another layout (the
// hashes, sorted sets and pause keys of before, or a later version) are never read as this
// one.
const (
	rollingMagic = "rw"
	fixedMagic   = "fw"
	bucketMagic  = "tb"
	layout       = "1"
)

// opCodes are the scripts' operation numbers (state.lua).
var opCodes = map[string]float64{"record": 1, "reserve": 2, "admit": 3, "peek": 4, "release": 5, "sync": 6}

// statePrefix is the start of the value of a key that holds exactly the slots of s, in order:
// magic, version, the length (uint16, little-endian) and the slot IDs joined by ",". The
// scripts compare it with the value's first bytes, so that they parse the slot IDs only for a
// key shared with another strategy.
func statePrefix(magic string, s *engine.Strategy) (string, error) {
	ids := make([]string, s.Slots())
	for j := range ids {
		ids[j] = s.CounterID(j)
		if strings.Contains(ids[j], ",") {
			return "", fmt.Errorf("ratemonitor: redis store: counter ID %q contains a comma, which the script's layout uses to separate them", ids[j])
		}
	}
	sig := strings.Join(ids, ",")
	if len(sig) > math.MaxUint16 {
		return "", fmt.Errorf("ratemonitor: redis store: the strategy's %d counter IDs take %d bytes, more than the layout's %d", len(ids), len(sig), math.MaxUint16)
	}
	return magic + layout + string(binary.LittleEndian.AppendUint16(nil, uint16(len(sig)))) + sig, nil
}

// argv packs an operation's one script argument (state.lua): op, n, the clock override (µs,
// −1 for Redis TIME), at (µs), the step tolerance, the slot and rule counts, the count of
// doubles that follow, the plan's doubles, extra's, then the prefix. Every figure is an integer
// below 2^53 (instants and durations in µs, counts up to 2^31), so exact as a double.
func (pl *plan) argv(op string, n, clock, at int64, extra []float64) string {
	b := make([]byte, 0, 8*(8+len(pl.nums)+len(extra))+len(pl.pre))
	d := func(x float64) { b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x)) }
	for _, x := range []float64{opCodes[op], float64(n), float64(clock), float64(at), float64(engine.StepTolerance.Microseconds()),
		float64(pl.slots), float64(pl.rules), float64(len(pl.nums) + len(extra))} {
		d(x)
	}
	for _, x := range pl.nums {
		d(x)
	}
	for _, x := range extra {
		d(x)
	}
	return string(append(b, pl.pre...))
}

// What the scripts report finding in a key they could not use (the reply's first figure).
var corruptions = map[int64]string{
	1: "a value of another type (WRONGTYPE)",
	2: "a value that is not the store's (no layout magic)",
	3: "a value of an unknown layout version",
	4: "an unreadable value (truncated or inconsistent)",
	5: "a value of another type where its in-flight leases belong (lease.lua)",
}

// settled strips the corruption figure from a script's reply and, when it is not 0, reports
// the loss to the observer: the script found key's Redis key unusable and started it afresh.
func (st *Store) settled(key string, res []int64) ([]int64, error) {
	if len(res) == 0 {
		return nil, fmt.Errorf("ratemonitor: redis store: key %q: empty reply from the script", key)
	}
	if c := res[0]; c != 0 && st.opts.Observer != nil {
		what, ok := corruptions[c]
		if !ok {
			what = fmt.Sprintf("an unusable value (code %d)", c)
		}
		st.opts.Observer.Observe(observe.Event{Kind: observe.StateLost, Store: "redis", Op: "corrupt", Key: key,
			Err: fmt.Errorf("ratemonitor: redis store: key %q held %s; its state was started afresh", key, what)})
	}
	return res[1:], nil
}
