package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// serverFault is a fault of the store's server, applied once to a run of every strategy.
type serverFault struct {
	name string
	// apply waits for the load to be under way, applies the fault and returns when it ended.
	apply func(t testing.TB) (start, end time.Time)
	// lossy: the server forgets its state (a restart without persistence), so grants are
	// judged apart before and after the fault, and what crossing it costs is reported.
	lossy bool
}

func serverFaults(tg Target) []serverFault {
	lead := 400 * time.Millisecond
	var fs []serverFault
	if tg.Stop != nil && tg.Start != nil {
		fs = append(fs, serverFault{name: "restart", lossy: true, apply: func(t testing.TB) (time.Time, time.Time) {
			time.Sleep(lead)
			start := time.Now()
			tg.Stop(t)
			time.Sleep(300 * time.Millisecond)
			tg.Start(t)
			return start, time.Now()
		}})
	}
	if tg.Pause != nil {
		fs = append(fs, serverFault{name: "pause", apply: func(t testing.TB) (time.Time, time.Time) {
			time.Sleep(lead)
			start := time.Now()
			tg.Pause(t, 400*time.Millisecond)
			time.Sleep(400 * time.Millisecond)
			return start, time.Now()
		}})
	}
	if tg.FlushScripts != nil {
		fs = append(fs, serverFault{name: "scriptflush", apply: func(t testing.TB) (time.Time, time.Time) {
			time.Sleep(lead)
			start := time.Now()
			for range 3 {
				tg.FlushScripts(t)
				time.Sleep(100 * time.Millisecond)
			}
			return start, time.Now()
		}})
	}
	return fs
}

// faults runs each server fault the target has under SendUncounted and SendNothing, each time on
// every strategy at once (one key each, 64 goroutines each). See faultCase.
func faults(t *testing.T, tg Target) {
	fs := serverFaults(tg)
	if len(fs) == 0 {
		t.Skipf("%s has no server to stop, pause or flush; contention and clock steps run in reserve64 and clockback/clockforward", tg.Name)
	}
	for _, f := range fs {
		for _, p := range []ratemonitor.StoreErrorPolicy{ratemonitor.SendUncounted, ratemonitor.SendNothing} {
			t.Run(f.name+"/"+p.String(), func(t *testing.T) { faultCase(t, tg, f, p) })
		}
	}
}

// faultCase paces every strategy through its own Transport while f strikes, and checks:
// grants at the store's instants never exceed a rule (apart before and after a lossy fault);
// under SendNothing nothing reaches the upstream uncounted and arrivals never exceed a rule;
// after the fault every key admits again (the waits told within its longest window, the first
// grant before the longest window and liveWithin have passed on the real clock). Under
// SendUncounted it reports what leaked: requests sent uncounted, and arrivals over the limit.
func faultCase(t *testing.T, tg Target, f serverFault, policy ratemonitor.StoreErrorPolicy) {
	rep := newReport(t, tg)
	defer rep.done()
	ss := realStrategies()
	recs := make([]*recorder, len(ss))
	for i := range ss {
		recs[i] = &recorder{Store: tg.Open(t, nil)}
	}
	loads := make([]load, len(ss))
	d := dur(1500 * time.Millisecond)
	over := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loads[i] = runLoad(t, recs[i], s, newKey("fault-"+f.name), policy, d, over)
		}()
	}
	start, end := f.apply(t)
	totals.faults.Add(1)
	close(over)
	wg.Wait()
	for i, l := range loads {
		s := l.s
		if err, at := recs[i].lastError(); err != nil && at.After(end) {
			// Not a failure: a client reconnecting (go-redis waits up to 1 s between dials
			// after a refused one) or a timeout under load; what counts is no lockout, below.
			t.Logf("%s: the last store error came %v after the fault ended: %v", s.Name(), at.Sub(end).Round(time.Millisecond), err)
		}
		name := s.Name()
		segs := [][]Grant{l.grants}
		arr := [][]Grant{l.arrivals}
		if f.lossy {
			segs = split(l.grants, start, end)
			arr = split(l.arrivals, start, end)
		}
		v, av := 0, 0
		for _, g := range segs {
			v += rep.violations(name+": grants at the store's instants", s, g, 0)
		}
		crossing := 0
		if f.lossy {
			if x, err := Check(s, l.grants, 0); err == nil {
				crossing = len(x)
			}
		}
		rep.waitsInBounds(s, l.waits, 0)
		first := firstGrantAfter(l.grants, end)
		if first < 0 || first > s.Longest()+liveWithin {
			rep.fail("%s: no grant within the longest window %v and %v after the fault ended (first: %v)", name, s.Longest(), liveWithin, first)
		}
		if l.last != nil {
			rep.fail("%s: a request after the run failed after %v: %v", name, l.lastTook, l.last)
		}
		leakedOver := 0
		var peak storetest.Violation // the arrivals furthest over a rule under SendUncounted
		if policy == ratemonitor.SendNothing {
			if l.uncounted != 0 {
				rep.fail("%s: SendNothing sent %d requests uncounted", name, l.uncounted)
			}
			for _, a := range arr {
				av += rep.violations(name+": arrivals at the upstream (send delay "+l.slack.String()+")", s, a, l.slack)
			}
		} else if x, err := Check(s, l.arrivals, l.slack); err == nil {
			leakedOver = len(x)
			for _, v := range x {
				if v.Count-v.Allow > peak.Count-peak.Allow {
					peak = v
				}
			}
		}
		t.Logf("%s %s %s under %v: fault %v; %d sent, %d granted, %d uncounted (%.0f/s of fault), %d refused for store errors, %d store errors; first grant %v after; violations: %d at grants, %d at arrivals; arrival instants over a rule: %d (worst: %d where %d allowed, rule %s); across the lost state: %d",
			tg.Name, f.name, name, policy, end.Sub(start).Round(time.Millisecond), len(l.sends), len(l.grants), l.uncounted,
			float64(l.uncounted)/end.Sub(start).Seconds(), l.failed, l.storeErrs, first.Round(time.Millisecond), v, av, leakedOver, peak.Count, peak.Allow, peak.Rule, crossing)
	}
}

// split returns the grants before start and those at or after end.
func split(gs []Grant, start, end time.Time) [][]Grant {
	var a, b []Grant
	for _, g := range gs {
		switch {
		case g.At.Before(start):
			a = append(a, g)
		case !g.At.Before(end):
			b = append(b, g)
		}
	}
	return [][]Grant{a, b}
}

// firstGrantAfter returns how long after end the first grant at or after it came; −1 when none.
func firstGrantAfter(gs []Grant, end time.Time) time.Duration {
	first := time.Duration(-1)
	for _, g := range gs {
		if e := g.At.Sub(end); e >= 0 && (first < 0 || e < first) {
			first = e
		}
	}
	return first
}
