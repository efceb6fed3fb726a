package rollingwindow

import (
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// sec turns a whole number of seconds into an instant.
func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

type key struct {
	t  *testing.T
	s  *engine.Strategy
	cs []engine.Counter
}

func newKey(t *testing.T, rules ...strategy.Rule) *key {
	t.Helper()
	s, err := New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	cs := s.NewCounters()
	return &key{t: t, s: s, cs: cs}
}

func (k *key) record(at float64, n int) { k.s.Record(k.cs, sec(at), n) }

func (k *key) used(at float64) []int {
	k.t.Helper()
	snap, err := k.s.Peek(k.cs, nil, sec(at), 0)
	if err != nil {
		k.t.Fatal(err)
	}
	var u []int
	for _, x := range snap.Usage {
		u = append(u, x.Used)
	}
	return u
}

func (k *key) wait(n int, at float64) time.Duration {
	k.t.Helper()
	snap, err := k.s.Peek(k.cs, nil, sec(at), n)
	if err != nil {
		k.t.Fatalf("wait(%d) at %v: %v", n, at, err)
	}
	return snap.Wait
}

var minute = strategy.Rule{Limit: 60, Window: time.Minute}

// TestAnswersMatchWorkedValues is the table of worked values (W = 60 s, N = 60
// unless said; docs/rules.md#window-semantics), row by row.
func TestAnswersMatchWorkedValues(t *testing.T) {
	type query struct {
		at   float64
		used int // -1: not asked
		n    int // burst for wait; 0: not asked
		wait time.Duration
	}
	s := time.Second
	rows := []struct {
		name    string
		rule    strategy.Rule
		history func(k *key)
		queries []query
	}{
		{"empty", minute, func(k *key) {}, []query{
			{1000, 0, 1, 0}, {1000, -1, 60, 0},
		}},
		{"60 at 1000", minute, func(k *key) { k.record(1000, 60) }, []query{
			{1000, 60, 1, 60 * s}, {1030, -1, 1, 30 * s}, {1059, -1, 1, 1 * s}, {1060, 0, 0, 0},
		}},
		{"1 each second 1000..1059", minute, func(k *key) {
			for i := 1000; i <= 1059; i++ {
				k.record(float64(i), 1)
			}
		}, []query{
			{1059, 60, 1, 1 * s}, {1059, -1, 10, 10 * s}, {1059, -1, 60, 60 * s},
			{1060, 59, 1, 0}, {1060, -1, 2, 1 * s},
		}},
		{"5 at 1000, 50 at 1020", minute, func(k *key) { k.record(1000, 5); k.record(1020, 50) }, []query{
			{1030, 55, 5, 0}, {1030, -1, 6, 30 * s}, {1030, -1, 10, 30 * s},
		}},
		{"W=10 N=5: 3 at 990, 5 at 995", strategy.Rule{Limit: 5, Window: 10 * s}, func(k *key) {
			k.record(990, 3)
			k.record(995, 5)
		}, []query{{1000, 5, 1, 5 * s}}},
		{"W=10 N=5: 8 at 1000", strategy.Rule{Limit: 5, Window: 10 * s}, func(k *key) { k.record(1000, 8) }, []query{
			{1000, 8, 1, 10 * s}, {1003, -1, 5, 7 * s},
		}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			k := newKey(t, row.rule)
			row.history(k)
			for _, q := range row.queries {
				if q.used >= 0 {
					if got := k.used(q.at)[0]; got != q.used {
						t.Errorf("used at %v = %d, want %d", q.at, got, q.used)
					}
				}
				if q.n > 0 {
					if got := k.wait(q.n, q.at); got != q.wait {
						t.Errorf("wait(%d) at %v = %v, want %v", q.n, q.at, got, q.wait)
					}
				}
			}
		})
	}
}

// TestBadBurstsRefusedWithoutRecording: a burst below 1 is ErrInvalidBurst, one over the limit
// ErrBurstTooLarge with a message that says why, and neither records anything.
func TestBadBurstsRefusedWithoutRecording(t *testing.T) {
	k := newKey(t, minute)
	if _, err := k.s.Peek(k.cs, nil, sec(1000), -1); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("peek burst -1: err = %v, want ErrInvalidBurst", err)
	}
	if _, err := k.s.Reserve(k.cs, nil, sec(1000), 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("reserve burst 0: err = %v, want ErrInvalidBurst", err)
	}
	_, err := k.s.Peek(k.cs, nil, sec(1000), 61)
	if !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Fatalf("burst 61: err = %v, want ErrBurstTooLarge", err)
	}
	if want := "burst exceeds limit: a burst of 61 can never fit rule 60/1m0s, which allows 60 per window"; err.Error() != want {
		t.Errorf("burst 61: message %q, want %q", err, want)
	}
	if _, err := k.s.Reserve(k.cs, nil, sec(1000), 61); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("reserve 61: err = %v", err)
	}
	if got := k.used(1000)[0]; got != 0 {
		t.Errorf("a refused burst recorded %d", got)
	}
}

// TestWindowEdgeExactToTheNanosecond checks s ≤ t < s+W at the nanosecond around s+W.
func TestWindowEdgeExactToTheNanosecond(t *testing.T) {
	k := newKey(t, minute)
	s := sec(1000)
	k.s.Record(k.cs, s, 1)
	for _, c := range []struct {
		at   time.Time
		used int
		wait time.Duration
	}{
		{s, 1, 0},
		{s.Add(time.Minute - time.Nanosecond), 1, 0},
		{s.Add(time.Minute), 0, 0},
		{s.Add(time.Minute + time.Nanosecond), 0, 0},
	} {
		snap, _ := k.s.Peek(k.cs, nil, c.at, 1)
		if snap.Usage[0].Used != c.used {
			t.Errorf("used at s+%v = %d, want %d", c.at.Sub(s), snap.Usage[0].Used, c.used)
		}
	}
	// With the limit reached, the wait lands exactly on s+W.
	k = newKey(t, strategy.Rule{Limit: 1, Window: time.Minute})
	k.s.Record(k.cs, s, 1)
	for _, c := range []struct {
		at   time.Time
		wait time.Duration
	}{
		{s.Add(time.Minute - time.Nanosecond), time.Nanosecond},
		{s.Add(time.Minute), 0},
		{s.Add(time.Minute + time.Nanosecond), 0},
	} {
		if snap, _ := k.s.Peek(k.cs, nil, c.at, 1); snap.Wait != c.wait {
			t.Errorf("wait(1) at s+%v = %v, want %v", c.at.Sub(s), snap.Wait, c.wait)
		}
	}
}

// TestBucketKeepsLatest: requests that share a granule are held until the latest of them + W,
// never released at the earliest's.
func TestBucketKeepsLatest(t *testing.T) {
	k := newKey(t, strategy.Rule{Limit: 2, Window: 10 * time.Second})
	k.record(100.1, 1)
	k.record(100.9, 1)
	if got := k.wait(1, 110.1); got != 800*time.Millisecond {
		t.Errorf("wait at 110.1 = %v, want 800ms (held to 100.9+10)", got)
	}
	if got := k.used(110.9); got[0] != 0 {
		t.Errorf("used at 110.9 = %d, want 0", got[0])
	}
}

// TestOutOfOrderRecordsCountFromOwnInstant: records that still count when they arrive give the
// same answers in any order.
func TestOutOfOrderRecordsCountFromOwnInstant(t *testing.T) {
	times := []float64{1000, 1005, 1010, 1010.5, 1020, 1030, 1059}
	// Every record arrives while it still counts in both windows (less than 30 s after the
	// latest one so far): such records count from their own instant, whatever the order.
	// (One that arrives later counts at the latest instant: TestLateWriteAlreadyExpiredCountsAtLatest.)
	orders := [][]int{{0, 1, 2, 3, 4, 5, 6}, {2, 1, 0, 3, 5, 4, 6}, {3, 0, 1, 2, 5, 4, 6}}
	var want []int
	var wantWait []time.Duration
	for oi, order := range orders {
		k := newKey(t, strategy.Rule{Limit: 7, Window: time.Minute}, strategy.Rule{Limit: 5, Window: 30 * time.Second})
		for _, i := range order {
			k.record(times[i], 1)
		}
		var got []int
		var gotWait []time.Duration
		for _, at := range []float64{1059, 1060, 1064, 1070.5, 1071, 1089, 1090} {
			got = append(got, k.used(at)...)
			gotWait = append(gotWait, k.wait(3, at))
		}
		if oi == 0 {
			want, wantWait = got, gotWait
			// In order, at 1059: 7 in the minute, 2 in the last 30 s (1030, 1059);
			// 3 more fit the 30 s rule but not the minute until 1000, 1005 and the bucket
			// of 1010 expire; that bucket also holds 1010.5, so it is held to 1070.5.
			if got[0] != 7 || got[1] != 2 || gotWait[0] != 11500*time.Millisecond {
				t.Fatalf("in order: used %v wait %v", got[:2], gotWait[0])
			}
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("order %v: used %v, want %v", order, got, want)
				break
			}
		}
		for i := range wantWait {
			if gotWait[i] != wantWait[i] {
				t.Errorf("order %v: waits %v, want %v", order, gotWait, wantWait)
				break
			}
		}
	}
}

// TestOverAllocationWaitsUntilEnoughExpire: 12 recorded against 5: a burst waits until enough of
// the buckets have gone for it to fit.
func TestOverAllocationWaitsUntilEnoughExpire(t *testing.T) {
	k := newKey(t, strategy.Rule{Limit: 5, Window: 10 * time.Second})
	k.record(1000, 4)
	k.record(1002, 4)
	k.record(1004, 4) // 12 used against 5
	if got := k.used(1004)[0]; got != 12 {
		t.Fatalf("used = %d, want 12", got)
	}
	// Room for 1 needs used ≤ 4: the 1000 and 1002 buckets must go (8 freed): at 1012.
	if got := k.wait(1, 1005); got != 7*time.Second {
		t.Errorf("wait(1) = %v, want 7s", got)
	}
	if got := k.wait(5, 1005); got != 9*time.Second {
		t.Errorf("wait(5) = %v, want 9s", got)
	}
}

// TestLayeredRulesCountOnceWaitForLongest: one request counts once in each rule; the wait is the
// maximum over the rules.
func TestLayeredRulesCountOnceWaitForLongest(t *testing.T) {
	k := newKey(t,
		strategy.Rule{Limit: 60, Window: time.Minute},
		// 1 s buckets, asked for: the hour's default, 1 min, would put the 40 at 0 in one bucket
		// with the 40 at 30 and free them at 3630 (30 s late, never early), not at 3600.
		strategy.Rule{Limit: 100, Window: time.Hour, Granularity: time.Second},
		strategy.Rule{Limit: 50, Window: time.Minute}, // same window: shares the minute log
	)
	if k.s.Slots() != 2 {
		t.Fatalf("slots = %d, want 2 (the two minute rules share a log)", k.s.Slots())
	}
	k.record(0, 40)
	k.record(30, 40)
	if got := k.used(30); got[0] != 80 || got[1] != 80 || got[2] != 80 {
		t.Fatalf("used = %v, want [80 80 80]", got)
	}
	// At 70: minute rules see 40 (from 30), hour sees 80.
	if got := k.used(70); got[0] != 40 || got[1] != 80 || got[2] != 40 {
		t.Fatalf("used at 70 = %v, want [40 80 40]", got)
	}
	// Burst of 20 at 70: the hour rule allows exactly 20 more, the 50/min rule needs the
	// 30-second bucket gone: wait until 90.
	if got := k.wait(20, 70); got != 20*time.Second {
		t.Errorf("wait(20) at 70 = %v, want 20s", got)
	}
	// Burst of 21: the hour rule needs the first 40 gone, at 3600.
	if got := k.wait(21, 70); got != 3530*time.Second {
		t.Errorf("wait(21) at 70 = %v, want 3530s", got)
	}
	snap, _ := k.s.Peek(k.cs, nil, sec(70), 0)
	if r := snap.Usage[2]; r.Remaining != 10 || r.Rule.Limit != 50 {
		t.Errorf("usage of rule 3 = %+v", r)
	}
}

// TestReserveRefusalRecordsNothing: Reserve grants up to the limit, refuses the next with the
// exact wait and records nothing for it, and grants again once the window has passed.
func TestReserveRefusalRecordsNothing(t *testing.T) {
	k := newKey(t, strategy.Rule{Limit: 3, Window: 10 * time.Second})
	for i := 0; i < 3; i++ {
		if res, err := k.s.Reserve(k.cs, nil, sec(100), 1); err != nil || !res.Allowed {
			t.Fatalf("reserve %d: %+v %v", i, res, err)
		}
	}
	res, _ := k.s.Reserve(k.cs, nil, sec(104), 1)
	if res.Allowed || res.Wait != 6*time.Second {
		t.Fatalf("4th reserve = %+v, want refused with 6s", res)
	}
	if got := k.used(104)[0]; got != 3 {
		t.Fatalf("a refused reserve recorded: used %d", got)
	}
	if res, _ := k.s.Reserve(k.cs, nil, sec(110), 3); !res.Allowed {
		t.Fatalf("reserve 3 at 110 = %+v", res)
	}
}

// TestInvalidRulesRefused: every invalid rule is ErrInvalidRule with a message that says why,
// and New refuses it (and no rules at all).
func TestInvalidRulesRefused(t *testing.T) {
	cases := []struct {
		r    strategy.Rule
		want string
	}{
		{strategy.Rule{}, "limit is 0"},
		{strategy.Rule{Limit: 1, Window: 500 * time.Millisecond}, "shorter than the granularity"},
		{strategy.Rule{Limit: 1, Window: 1500 * time.Millisecond}, "not a whole multiple"},
		{strategy.Rule{Limit: 5, Window: time.Minute, Headroom: 5}, "headroom 5"},
		{strategy.Rule{Limit: 5, Window: time.Minute, Margin: -time.Second}, "margin -1s is negative"},
		{strategy.Rule{Limit: 5, Window: time.Minute, Granularity: -1}, "negative"},
	}
	for _, c := range cases {
		err := c.r.Validate()
		if !errors.Is(err, strategy.ErrInvalidRule) || !contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one containing %q", c.r, err, c.want)
		}
		if _, err := New(minute, c.r); !errors.Is(err, strategy.ErrInvalidRule) {
			t.Errorf("New accepted %+v", c.r)
		}
	}
	if _, err := New(); !errors.Is(err, engine.ErrNoRules) {
		t.Errorf("New() err = %v", err)
	}
	ok := strategy.Rule{Limit: 1, Window: 1500 * time.Millisecond, Granularity: 500 * time.Millisecond}
	if err := ok.Validate(); err != nil {
		t.Errorf("%v", err)
	}
}

// TestMarginLengthensWindowHeadroomLowersLimit: a margin adds to the window, a headroom takes
// from the limit, for the wait and for the largest burst.
func TestMarginLengthensWindowHeadroomLowersLimit(t *testing.T) {
	k := newKey(t, strategy.Rule{Limit: 5, Window: 10 * time.Second, Margin: 2 * time.Second, Headroom: 1})
	k.record(100, 4)
	if got := k.wait(1, 100); got != 12*time.Second {
		t.Errorf("wait = %v, want 12s (window 10s + margin 2s, limit 5 − headroom 1)", got)
	}
	snap, _ := k.s.Peek(k.cs, nil, sec(100), 0)
	if snap.Usage[0].Remaining != 0 {
		t.Errorf("remaining = %d, want 0", snap.Usage[0].Remaining)
	}
	if err := k.s.CheckBurst(5); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 5 against effective limit 4: %v", err)
	}
}

// TestParseRuleReadsLimitAndWindow: "5000/24h" reads as such and prints back; malformed rules
// are ErrInvalidRule.
func TestParseRuleReadsLimitAndWindow(t *testing.T) {
	r, err := strategy.ParseRule("5000/24h")
	if err != nil || r.Limit != 5000 || r.Window != 24*time.Hour {
		t.Fatalf("ParseRule = %+v, %v", r, err)
	}
	if got := r.String(); got != "5000/24h0m0s" {
		t.Errorf("String = %q", got)
	}
	for _, bad := range []string{"", "60", "x/1m", "60/soon", "0/1m", "60/0s"} {
		if _, err := strategy.ParseRule(bad); !errors.Is(err, strategy.ErrInvalidRule) {
			t.Errorf("ParseRule(%q) err = %v", bad, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestTimeNeverGoesBack: a query or reservation dated before the latest instant a key has seen
// is answered at that instant, so it cannot see state that was already dropped.
func TestTimeNeverGoesBack(t *testing.T) {
	k := newKey(t, minute)
	k.record(1000, 60)
	k.used(1060) // the key's time is now 1060: the 60 are gone
	res, err := k.s.Reserve(k.cs, nil, sec(1059.9), 1)
	if err != nil || !res.Allowed || !res.At.Equal(sec(1060)) {
		t.Fatalf("reserve dated 1059.9 after 1060 was seen: %+v %v; want allowed at 1060", res, err)
	}
	// The reservation is held from 1060, not from the earlier date it was asked at.
	if got := k.wait(60, 1119.9); got != 100*time.Millisecond {
		t.Errorf("wait(60) at 1119.9 = %v, want 100ms", got)
	}

	// A record that still counts when it arrives counts from its own instant; one that no
	// longer would (1000 + 60 ≤ 1070) counts at the latest instant instead, never dropped.
	answers := func(first, second func(k *key)) (int, time.Duration) {
		k := newKey(t, minute)
		first(k)
		second(k)
		return k.used(1030)[0], k.wait(1, 1030)
	}
	a := func(k *key) { k.record(1000, 60) }
	b := func(k *key) { k.record(1070, 1) }
	if u, w := answers(a, b); u != 1 || w != 0 {
		t.Errorf("in order: %d, %v; want 1, 0 (answered at 1070)", u, w)
	}
	// 61 count at 1070 until 1130: 60 s after 1070, and the wait is measured from 1030, the
	// instant asked at (40 s before the key's latest).
	if u, w := answers(b, a); u != 61 || w != 100*time.Second {
		t.Errorf("late record: %d, %v; want 61, 1m40s (counted at 1070)", u, w)
	}
}

// TestLateWriteAlreadyExpiredCountsAtLatest: a record that no longer counts when it arrives counts
// at the latest instant instead (never dropped: docs/rules.md#window-semantics), even with the ring full.
func TestLateWriteAlreadyExpiredCountsAtLatest(t *testing.T) {
	k := newKey(t, strategy.Rule{Limit: 10, Window: 2 * time.Second})
	k.record(10.5, 1)
	k.record(11.0, 1)
	k.record(12.4, 1)
	k.record(0, 5)
	if got := k.used(12.4)[0]; got != 8 {
		t.Errorf("used = %d, want 8", got)
	}
	// The 5 are held with the record at 12.4, until 14.4; the one at 10.5 leaves at 12.5.
	if got := k.used(12.5)[0]; got != 7 {
		t.Errorf("used at 12.5 = %d, want 7", got)
	}
	if got := k.used(14.4)[0]; got != 0 {
		t.Errorf("used at 14.4 = %d, want 0", got)
	}
}

// TestOverflowingRulesRefused: a window+margin past MaxWindow is refused, MaxWindow itself
// accepted.
func TestOverflowingRulesRefused(t *testing.T) {
	for _, r := range []strategy.Rule{
		{Limit: 1, Window: 1 << 62, Margin: 1 << 62, Granularity: 1 << 20},
		{Limit: 1, Window: 250 * 365 * 24 * time.Hour},
	} {
		if err := r.Validate(); !errors.Is(err, strategy.ErrInvalidRule) {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (strategy.Rule{Limit: 1, Window: strategy.MaxWindow}).Validate(); err != nil {
		t.Errorf("MaxWindow refused: %v", err)
	}
}
