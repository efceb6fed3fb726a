package rollingwindow

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ratemonitor/ratemonitor/internal/rollinglog"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestNanoPathMatchesTimePath: a strategy's int64 path (ReserveNanos, RecordNanos, WaitNanos,
// UsedNanos, LatestNanos) answers exactly as its time.Time path (Reserve, Record, Wait, Used,
// Latest) on twin counters, over random layered rules (some sharing a log), records, reserves,
// releases, queries, time passing, queries dated in the past and clock shifts; the two sets of
// counters hold the same state throughout (their encodings are equal).
func TestNanoPathMatchesTimePath(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var rules []strategy.Rule
		for range rapid.IntRange(1, 3).Draw(rt, "rules") {
			rules = append(rules, strategy.Rule{
				Limit:  rapid.SampledFrom([]int{1, 2, 5, 60, 1000}).Draw(rt, "limit"),
				Window: rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, time.Minute, 24 * time.Hour}).Draw(rt, "window"),
			})
		}
		s, err := New(rules...)
		if err != nil {
			rt.Fatal(err)
		}
		if !s.Nanos() {
			rt.Fatal("a rolling-window strategy does not take the int64 path")
		}
		a, b := s.NewCounters(), s.NewCounters()
		now := rapid.SampledFrom([]int64{0, -int64(time.Hour) - 3, 1_800_000_000_123_456_789}).Draw(rt, "epoch")
		var allowed []int64
		for range rapid.IntRange(1, 150).Draw(rt, "ops") {
			switch rapid.IntRange(0, 7).Draw(rt, "op") {
			case 0: // time passes
				now += rapid.SampledFrom([]int64{0, 1, int64(time.Millisecond), int64(time.Second), int64(time.Minute), int64(time.Hour)}).Draw(rt, "d") *
					rapid.Int64Range(0, 70).Draw(rt, "k")
			case 1: // the caller's clock read a little behind the key's time
				now -= rapid.Int64Range(0, int64(2*time.Second)).Draw(rt, "back")
			case 2, 3: // reserve
				n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "n")
				want, err := s.Reserve(a, nil, time.Unix(0, now), n)
				if err != nil {
					rt.Fatal(err)
				}
				ok, wait, at := s.ReserveNanos(b, now, n)
				if ok != want.Allowed || wait != want.Wait || ok && at != want.At.UnixNano() {
					rt.Fatalf("ReserveNanos(%d, %d) = %v %v %d; Reserve: %+v", now, n, ok, wait, at, want)
				}
				if ok {
					allowed = append(allowed, at)
				}
			case 4: // record
				n := rapid.IntRange(1, 70).Draw(rt, "n")
				s.Record(a, time.Unix(0, now), n)
				s.RecordNanos(b, now, n)
			case 5: // wait and usage
				n := rapid.IntRange(1, s.MaxBurst()).Draw(rt, "n")
				if w, v := s.Wait(a, time.Unix(0, now), n), s.WaitNanos(b, now, n); int64(w) != v {
					rt.Fatalf("WaitNanos(%d, %d) = %d; Wait: %d", now, n, v, w)
				}
				for j := range s.Slots() {
					if u, v := a[j].Used(time.Unix(0, now)), s.UsedNanos(b, j, now); u != v {
						rt.Fatalf("slot %d: UsedNanos(%d) = %d; Used: %d", j, now, v, u)
					}
				}
			case 6: // release
				if len(allowed) > 0 {
					at := rapid.SampledFrom(allowed).Draw(rt, "at")
					s.Release(a, time.Unix(0, at), 1)
					s.Release(b, time.Unix(0, at), 1)
				}
			case 7: // the clock steps
				d := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(rt, "shift"))
				for j := range a {
					a[j].Shift(d)
					b[j].Shift(d)
				}
				now += int64(d)
			}
			for j := range a {
				l, seen := b[j].(*rollinglog.Log).LatestNanos()
				if want := a[j].Latest(); seen == want.IsZero() || seen && l != want.UnixNano() {
					rt.Fatalf("slot %d: LatestNanos = %d %v; Latest: %v", j, l, seen, want)
				}
				ea, _ := a[j].(*rollinglog.Log).MarshalBinary()
				eb, _ := b[j].(*rollinglog.Log).MarshalBinary()
				if string(ea) != string(eb) {
					rt.Fatalf("slot %d: the two paths left different states", j)
				}
			}
		}
	})
}

// TestNanosChosenByStrategy: a smoothed strategy (its GCRAs have no Unix-ns methods) does not take
// the int64 path; a plain rolling window does.
func TestNanosChosenByStrategy(t *testing.T) {
	s, err := New(strategy.Rule{Limit: 60, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := s.Smoothed()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Nanos() || sm.Nanos() {
		t.Fatalf("Nanos: plain %v, smoothed %v; want true, false", s.Nanos(), sm.Nanos())
	}
}
