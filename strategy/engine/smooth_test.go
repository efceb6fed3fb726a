package engine_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestGCRAWaitsRefundsAndDecodesExactly: the GCRA's waits, refunds (none for a charge older
// than b·T), saturation past the burst, encoding round trip, shift, and refusal of bad data.
func TestGCRAWaitsRefundsAndDecodesExactly(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	T := 20 * time.Second
	g := engine.NewGCRA(T, 3)
	if d := g.WaitTime(t0, 3, 0); d != 0 {
		t.Fatalf("idle: wait(3) = %v", d)
	}
	g.Add(t0, 2)
	if d := g.WaitTime(t0, 1, 0); d != 0 {
		t.Fatalf("after 2: wait(1) = %v, want 0", d)
	}
	if d := g.WaitTime(t0, 2, 0); d != T {
		t.Fatalf("after 2: wait(2) = %v, want %v", d, T)
	}
	g.Add(t0, 1)
	if d, u := g.WaitTime(t0.Add(5*time.Second), 1, 0), g.Used(t0.Add(5*time.Second)); d != 15*time.Second || u != 3 {
		t.Fatalf("after 3, 5 s later: wait(1) = %v, used %d; want 15s, 3", d, u)
	}
	g.Remove(t0, 1)
	if d := g.WaitTime(t0.Add(5*time.Second), 1, 0); d != 0 {
		t.Fatalf("after a refund: wait(1) = %v, want 0", d)
	}
	// monitoring past the burst saturates at a full burst: one interval later one more fits
	g.Add(t0.Add(5*time.Second), 100)
	if e := g.Expiry(); !e.Equal(t0.Add(5*time.Second + 3*T)) {
		t.Fatalf("after 100 records: TAT %v, want now + b·T", e.Sub(t0))
	}
	if d := g.WaitTime(t0.Add(5*time.Second), 1, 0); d != T {
		t.Fatalf("after 100 records: wait(1) = %v, want %v", d, T)
	}
	// a charge older than b·T refunds nothing
	g.Add(t0.Add(65*time.Second), 3)
	g.Remove(t0, 3)
	if d := g.WaitTime(t0.Add(65*time.Second), 1, 0); d != T {
		t.Fatalf("after an old refund: wait(1) = %v, want %v", d, T)
	}
	b, _ := g.MarshalBinary()
	h := engine.NewGCRA(T, 3)
	if err := h.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if h.Expiry() != g.Expiry() || h.Latest() != g.Latest() {
		t.Fatalf("round trip: %v %v, want %v %v", h.Expiry(), h.Latest(), g.Expiry(), g.Latest())
	}
	g.Shift(-time.Hour)
	if e := g.Expiry(); !e.Equal(t0.Add(65*time.Second + 3*T - time.Hour)) {
		t.Fatalf("shifted TAT %v", e.Sub(t0))
	}
	far := engine.NewGCRA(T, 3)
	far.Add(t0, 3)
	fb, _ := far.MarshalBinary()
	for name, data := range map[string][]byte{"truncated": fb[:len(fb)-1], "trailing": append(append([]byte(nil), fb...), 0), "other format": {1, 0}} {
		if err := engine.NewGCRA(T, 3).UnmarshalBinary(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// the same state for a GCRA with a smaller burst: its TAT is further ahead than b·T
	if err := engine.NewGCRA(T, 2).UnmarshalBinary(fb); err == nil {
		t.Error("a TAT 3·T ahead decoded for a burst of 2")
	}
}

// TestSmoothedAddsOneGCRAPerLog: Smoothed adds a GCRA slot per log (rules sharing a log share
// it), caps bursts at the GCRA's, and is refused for a fixed window.
func TestSmoothedAddsOneGCRAPerLog(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	minute := strategy.Rule{Limit: 60, Window: time.Minute}
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour}
	plain, _ := rollingwindow.New(minute, day, strategy.Rule{Limit: 60, Window: time.Minute})
	s, err := plain.Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	if s.Slots() != 4 || !s.Smoothing() || plain.Smoothing() || plain.Slots() != 2 {
		t.Fatalf("slots %d (plain %d): want 2 logs and 2 GCRAs (the two minute rules share one)", s.Slots(), plain.Slots())
	}
	if again, _ := s.Smoothed(); again != s {
		t.Error("Smoothed of a smoothed strategy made another")
	}
	if T, b, ok := s.SmoothSlot(2); !ok || b != 30 || T != 1935484*time.Microsecond || s.CounterID(2) != "gcra:1935484000:30" {
		t.Errorf("slot 2: %v %d %v %q", T, b, ok, s.CounterID(2))
	}
	if _, _, ok := s.SmoothSlot(1); ok {
		t.Error("slot 1 (the day log) reported as a GCRA")
	}
	if s.MaxBurst() != 30 {
		t.Errorf("MaxBurst %d, want 30", s.MaxBurst())
	}
	if err := s.CheckBurst(31); !errors.Is(err, strategy.ErrBurstTooLarge) {
		t.Errorf("CheckBurst(31) = %v", err)
	}
	cs := s.NewCounters()
	if res, _ := s.Reserve(cs, nil, t0, 30); !res.Allowed {
		t.Fatal("30 from idle refused")
	}
	res, _ := s.Reserve(cs, nil, t0, 1)
	if res.Allowed || res.Wait != 1935484*time.Microsecond {
		t.Fatalf("31st: %+v, want a wait of one interval", res)
	}
	snap, _ := s.Peek(cs, nil, t0, 1)
	if snap.Wait != res.Wait || snap.Usage[0].Used != 30 || len(snap.Usage) != 3 {
		t.Fatalf("peek: %+v", snap)
	}
	s.Release(cs, t0, 30)
	if d := s.Wait(cs, t0, 30); d != 0 {
		t.Fatalf("after release: wait(30) = %v", d)
	}
	if sc := s.Scaled(0.5); !sc.Smoothing() || sc.MaxBurst() != 15 {
		t.Errorf("Scaled(0.5): smoothing %v, MaxBurst %d; want true, 15", sc.Smoothing(), sc.MaxBurst())
	}
	dayID := s.CounterID(1)
	if sub := s.Without(func(id string) bool { return id == dayID }); !sub.Smoothing() || sub.Slots() != 2 {
		t.Errorf("Without the day: smoothing %v, slots %d; want true, 2", sub.Smoothing(), sub.Slots())
	}
	fw, _ := fixedwindow.New(minute)
	if _, err := fw.Smoothed(); !errors.Is(err, engine.ErrNotSmoothable) {
		t.Errorf("fixed window: %v, want ErrNotSmoothable", err)
	}
}
