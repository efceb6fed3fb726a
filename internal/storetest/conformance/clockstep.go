package conformance

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// clockStep steps the store's clock by step (back 1 h, forward 1 day) in the middle of a run
// of 64 goroutines reserving on one key and monitoring records on another, then checks:
//
//   - no record is dropped: the records after the step are counted (at the key's latest
//     instant when the clock went back), so usage equals the model's;
//   - every grant, before and after, is judged at its store instant, and after a step back
//     also at its true instant (the upstream's clock did not move back): no store admits
//     more after a step back than before it;
//   - a wait told is honoured (a lone caller told d is granted after d), and the key admits
//     again within its longest window of the step (no lockout).
func clockStep(t *testing.T, tg Target, s *engine.Strategy, step time.Duration) {
	rep := newReport(t, tg)
	defer rep.done()
	clk := clock.NewManual(t0)
	sk := &skewed{m: clk}
	rec := &recorder{Store: tg.Open(t, sk), real: clk}
	key, mkey := newKey("step"), newKey("steprec")
	c := ctx(t)
	var recs []Grant
	latest := time.Time{} // the monitoring key's latest instant
	record := func(n int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		w := min(n, workers(tg))
		for i := range w {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := i; j < n; j += w {
					if err := rec.record(c, s, mkey, 1); err != nil {
						rep.fail("record: %v", err)
						continue
					}
					mu.Lock()
					recs = append(recs, Grant{At: later(latest, sk.Now()), N: 1})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		latest = later(latest, sk.Now())
	}
	reserve := func() {
		var wg sync.WaitGroup
		for range workers(tg) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := rec.reserve(c, s, key, 1); err != nil {
					rep.fail("reserve: %v", err)
				}
			}()
		}
		wg.Wait()
	}
	// Before the step: a few rounds, 200 ms apart.
	for range 3 {
		reserve()
		record(20)
		clk.Advance(200 * time.Millisecond)
	}
	before, _, _ := rec.kept()
	lastBefore := before[len(before)-1].At
	for _, g := range before {
		lastBefore = later(lastBefore, g.At)
	}
	sk.off.Add(int64(step))
	totals.faults.Add(1)
	stepAt := clk.Now() // true time
	// 130 records just after the step (the figure), then usage must count them all.
	record(130)
	if got, want := storetest.Used(t, rec, s, mkey), storetest.ModelUsed(s, recs, later(latest, sk.Now())); !slices.Equal(got, want) {
		rep.fail("after stepping the clock %v, %d records: store counts %v, model %v", step, 130, got, want)
	}
	// After the step: rounds until the longest window has passed in true time, with a lone
	// caller's wait checked in each.
	firstAfter := time.Duration(-1)
	dishonoured := 0
	// 10 rounds over the longest window and a second (fewer for a slow store, more soaking).
	stride := (s.Longest() + time.Second) / time.Duration(rounds(tg, 10, 100*time.Millisecond))
	for clk.Now().Sub(stepAt) <= s.Longest()+time.Second {
		reserve()
		res, err := rec.reserve(c, s, key, 1)
		if err == nil && !res.Allowed {
			d := res.Wait
			if d < 0 || d > s.Longest() {
				rep.fail("after the step: wait %v outside [0, %v]", d, s.Longest())
			}
			clk.Advance(micro(d) + tolerance(s))
			res, err = rec.reserve(c, s, key, 1)
			if err == nil && !res.Allowed {
				if dishonoured++; dishonoured == 1 {
					rep.fail("after stepping the clock %v: told to wait %v, still refused after it (now told %v)", step, d, res.Wait)
				}
			}
		}
		if err != nil {
			rep.fail("reserve after the step: %v", err)
		}
		after, _, _ := rec.kept()
		if firstAfter < 0 && len(after) > len(before) {
			firstAfter = clk.Now().Sub(stepAt)
		}
		clk.Advance(stride)
	}
	if dishonoured > 1 {
		rep.fail("after stepping the clock %v: %d waits told were not honoured", step, dishonoured)
	}
	if firstAfter < 0 || firstAfter > s.Longest() {
		rep.fail("after stepping the clock %v the key admitted nothing within its longest window %v", step, s.Longest())
	}
	grants, waits, _ := rec.kept()
	rep.waitsInBounds(s, waits, 0)
	// After the step a store dates grants either on the new clock (the memory, SQLite and
	// DynamoDB stores rebase the key, engine.Rebase) or on the key's own timeline carried on
	// from before the step (the Redis scripts keep a clock offset per key): either way no earlier
	// than where that timeline stood at the step, and no later than that plus the time truly
	// passed since and engine.StepTolerance (the most a key is answered ahead of its clock).
	passed := clk.Now().Sub(stepAt) + engine.StepTolerance
	stepped := stepAt.Add(step)
	for _, g := range grants[len(before):] {
		onNew := !g.At.Before(stepped) && !g.At.After(stepped.Add(passed))
		onOld := !g.At.Before(lastBefore) && !g.At.After(later(lastBefore, stepAt).Add(passed))
		if !onNew && !onOld {
			rep.fail("a grant after the step %v is dated %v, neither in [%v, %v] (the new clock) nor in [%v, %v] (the key's timeline)",
				step, g.At, stepped, stepped.Add(passed), lastBefore, later(lastBefore, stepAt).Add(passed))
			break
		}
	}
	v := rep.violations("grants at the store's instants", s, grants, 0)
	if step < 0 {
		v += rep.violations("grants at their true instants", s, rec.trueGrants(), 0)
	}
	t.Logf("%s %s, clock stepped %v: %d grants, first grant %v after the step, %d records, %d violations",
		tg.Name, s.Name(), step, len(grants), firstAfter, len(recs), v)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
