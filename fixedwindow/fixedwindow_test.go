package fixedwindow

import (
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func sec(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

func newStrategy(t *testing.T, rules ...strategy.Rule) (*engine.Strategy, []engine.Counter) {
	t.Helper()
	s, err := New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return s, s.NewCounters()
}

var minute = strategy.Rule{Limit: 60, Window: time.Minute}

// TestAnswersMatchWorkedValues: W=60 s, N=60. Windows are aligned on the minute: 1000 s lies in
// [960, 1020).
func TestAnswersMatchWorkedValues(t *testing.T) {
	cases := []struct {
		name    string
		history map[float64]int
		at      float64
		used    int
		wait1   time.Duration
		waitN   int
		wantN   time.Duration
	}{
		{"empty", nil, 1000, 0, 0, 60, 0},
		{"full window", map[float64]int{1000: 60}, 1000, 60, 20 * time.Second, 60, 20 * time.Second},
		{"full, 19.5 s later", map[float64]int{1000: 60}, 1019.5, 60, 500 * time.Millisecond, 1, 500 * time.Millisecond},
		{"next window starts empty", map[float64]int{1000: 60}, 1020, 0, 0, 60, 0},
		{"two windows", map[float64]int{1000: 30, 1030: 20}, 1030, 20, 0, 41, 50 * time.Second},
		{"room for exactly the rest", map[float64]int{961: 59}, 1019, 59, 0, 2, time.Second},
		{"window start is inclusive", map[float64]int{960: 60}, 960, 60, time.Minute, 1, time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, cs := newStrategy(t, minute)
			for _, at := range sortedKeys(c.history) {
				s.Record(cs, sec(at), c.history[at])
			}
			snap, err := s.Peek(cs, nil, sec(c.at), 1)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Usage[0].Used != c.used || snap.Wait != c.wait1 {
				t.Errorf("used, wait(1) = %d, %v; want %d, %v", snap.Usage[0].Used, snap.Wait, c.used, c.wait1)
			}
			snap, err = s.Peek(cs, nil, sec(c.at), c.waitN)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Wait != c.wantN {
				t.Errorf("wait(%d) = %v, want %v", c.waitN, snap.Wait, c.wantN)
			}
		})
	}
}

func sortedKeys(m map[float64]int) []float64 {
	var ks []float64
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// TestAdmitCountsRefused: the (limit+1)-th attempt is counted and refused, and Retry-After is
// the window's end minus now.
func TestAdmitCountsRefused(t *testing.T) {
	s, cs := newStrategy(t, strategy.Rule{Limit: 3, Window: 10 * time.Second})
	for i := range 3 {
		d, err := s.Admit(cs, sec(1001.25), 1)
		if err != nil || !d.Allowed || d.RetryAfter != 0 {
			t.Fatalf("attempt %d: %+v, %v; want allowed", i+1, d, err)
		}
		want := strategy.RuleState{Rule: s.Rule(0), Used: i + 1, Remaining: 2 - i, Reset: 8750 * time.Millisecond}
		if d.Rules[0] != want {
			t.Errorf("attempt %d: state %+v, want %+v", i+1, d.Rules[0], want)
		}
	}
	for i, at := range []float64{1001.25, 1009.999} {
		d, err := s.Admit(cs, sec(at), 1)
		if err != nil {
			t.Fatal(err)
		}
		wantWait := sec(1010).Sub(sec(at))
		if d.Allowed || d.RetryAfter != wantWait || d.Rules[0].Used != 4+i || d.Rules[0].Remaining != 0 {
			t.Errorf("attempt %d at %v: %+v; want refused, wait %v, used %d", 4+i, at, d, wantWait, 4+i)
		}
	}
	d, _ := s.Admit(cs, sec(1010), 1)
	if !d.Allowed || d.Rules[0].Used != 1 || d.Rules[0].Reset != 10*time.Second {
		t.Errorf("first attempt of the next window: %+v; want allowed, used 1, reset 10s", d)
	}
}

// TestLayeredRulesCountRefusedInBoth: 2 per second and 3 per minute on one key; the minute rule
// refuses the fourth attempt although its second has room, and all refused attempts count in both.
func TestLayeredRulesCountRefusedInBoth(t *testing.T) {
	s, cs := newStrategy(t, strategy.Rule{Limit: 2, Window: time.Second}, strategy.Rule{Limit: 3, Window: time.Minute})
	steps := []struct {
		at      float64
		allowed bool
		wait    time.Duration
		used    [2]int
	}{
		{60.1, true, 0, [2]int{1, 1}},
		{60.2, true, 0, [2]int{2, 2}},
		{60.3, false, 59700 * time.Millisecond, [2]int{3, 3}},
		// The second has room, but the minute rule is at 3 (the refused attempt counted).
		{61, false, 59 * time.Second, [2]int{1, 4}},
	}
	for _, st := range steps {
		d, err := s.Admit(cs, sec(st.at), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != st.allowed || d.RetryAfter != st.wait || d.Rules[0].Used != st.used[0] || d.Rules[1].Used != st.used[1] {
			t.Errorf("at %v: allowed %v wait %v used %d,%d; want %v %v %v", st.at, d.Allowed, d.RetryAfter,
				d.Rules[0].Used, d.Rules[1].Used, st.allowed, st.wait, st.used)
		}
	}
}

// TestInvalidRulesAndBurstsRefused: no rules, a limit of 0, a burst over the limit or of 0 are
// errors, and a refused burst counts nothing.
func TestInvalidRulesAndBurstsRefused(t *testing.T) {
	if _, err := New(); !errors.Is(err, engine.ErrNoRules) {
		t.Errorf("no rules: %v", err)
	}
	if _, err := New(strategy.Rule{Limit: 0, Window: time.Second}); !errors.Is(err, strategy.ErrInvalidRule) {
		t.Errorf("limit 0: %v", err)
	}
	s, cs := newStrategy(t, minute)
	if _, err := s.Admit(cs, sec(0), 61); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("burst 61: %v", err)
	}
	if _, err := s.Admit(cs, sec(0), 0); !errors.Is(err, strategy.ErrInvalidBurst) {
		t.Errorf("burst 0: %v", err)
	}
	if got := cs[0].Used(sec(0)); got != 0 {
		t.Errorf("a refused burst error counted %d", got)
	}
}

// TestWindowNeedNotBeWholeSeconds: the fixed window ignores granularity, so windows need not be
// whole seconds.
func TestWindowNeedNotBeWholeSeconds(t *testing.T) {
	s, err := New(strategy.Rule{Limit: 3, Window: 1500 * time.Millisecond}, strategy.Rule{Limit: 5, Window: 90 * time.Second, Margin: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.NewCounters()
	d, _ := s.Admit(cs, sec(1.2), 1)
	if !d.Allowed || d.Rules[0].Reset != 300*time.Millisecond || d.Rules[1].Reset != 89300*time.Millisecond {
		t.Errorf("%+v; want resets at 1.5 s and 90.5 s", d)
	}
	for _, r := range []strategy.Rule{{Limit: 1, Window: 0}, {Limit: 1, Window: -time.Second}} {
		if _, err := New(r); !errors.Is(err, strategy.ErrInvalidRule) {
			t.Errorf("window %v: %v", r.Window, err)
		}
	}
}

// TestIsTellsFixedWindowApart: Is holds for a fixed-window strategy alone.
func TestIsTellsFixedWindowApart(t *testing.T) {
	s, _ := New(minute)
	tb, err := engine.New(otherAlgorithm{}, minute)
	if err != nil {
		t.Fatal(err)
	}
	if !fixedcount.Is(s) || fixedcount.Is(tb) {
		t.Errorf("Is(fixed window) = %v, Is(other) = %v; want true, false", fixedcount.Is(s), fixedcount.Is(tb))
	}
}

type otherAlgorithm struct{ algorithm }

func (otherAlgorithm) Name() string { return "other" }
