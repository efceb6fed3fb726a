package profiles_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestXeroDayResumesAtXerosReset: Xero counts a tenant's day in a fixed window of the tenant's
// own (standin.Xero, from Xero's limits page). The tenant has 300 calls left of its day 15
// minutes before that day resets, and 5 goroutines send 420 calls. The minute rule takes the
// 300 in 4 min 54 s; X-DayLimit-Remaining then says 0, and the rolling day rule would hold the
// tenant for a day. Instead, a minute later, one call (the probe) is refused with a day 429
// whose Retry-After gives the reset, and the tenant resumes at that reset to the second: 1 day
// 429, 0 minute 429, and the 120 calls left all accepted after the reset.
func TestXeroDayResumesAtXerosReset(t *testing.T) {
	const tenant, left, calls = "tenant-day", 300, 420
	sim := newSimulation(t)
	x := standin.NewXero(sim.clk.Now)
	end := x.DayEnds(tenant, sim.clk.Now()).Add(24 * time.Hour) // a day end well after t0
	sim.clk.Set(end.Add(-15 * time.Minute))
	x.UseDay(tenant, 5000-left)

	var mu sync.Mutex
	var accepted []time.Time
	var refusedAt []time.Time
	rec := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &statusWriter{ResponseWriter: w}
		now := sim.clk.Now()
		x.ServeHTTP(rw, r)
		mu.Lock()
		if rw.status == http.StatusTooManyRequests {
			refusedAt = append(refusedAt, now)
		} else {
			accepted = append(accepted, now)
		}
		mu.Unlock()
	})
	tr, err := ratemonitor.New(recorderTransport{rec},
		append(profiles.Xero("xero-app:test").Options(),
			ratemonitor.WithClock(sim.clk), ratemonitor.WithStore(sim.store), ratemonitor.WithInFlightLease(48*time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	defer sim.run()()
	// A call's 2 grants (the tenant's and the app's) are spent once the Transport has learnt
	// from its answer, not when the stand-in has answered: the clock must not jump between the
	// two (say, to the rolling day's end), which real time would not do.
	c := &http.Client{Transport: learnt{tr, sim}}
	var wg sync.WaitGroup
	var next sync.Mutex
	sent := 0
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			for {
				next.Lock()
				if sent == calls {
					next.Unlock()
					return
				}
				sent++
				next.Unlock()
				resp, err := c.Do(request("https://api.xero.com/api.xro/2.0/Invoices", "Xero-Tenant-Id", tenant))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var before, after int
	var ranOut, resumed time.Time
	for _, at := range accepted {
		if at.Before(end) {
			before++
			ranOut = at
		} else {
			after++
			if resumed.IsZero() {
				resumed = at
			}
		}
	}
	t.Logf("day reset at %v (15 min after the start); %d calls accepted before it, the last %v before it; %d refused (day %d, minute %d, concurrent %d) at %v; resumed %v after the reset; %d accepted after it",
		end.Format(time.TimeOnly), before, end.Sub(ranOut), len(refusedAt), x.RefusedFor("day"), x.RefusedFor("minute"), x.RefusedFor("concurrent"),
		fmtAfter(refusedAt, end), resumed.Sub(end), after)
	if before != left || after != calls-left-len(refusedAt) {
		t.Errorf("%d accepted before the reset and %d after; want %d and %d", before, after, left, calls-left-len(refusedAt))
	}
	if x.RefusedFor("day") != 1 || x.RefusedFor("minute") != 0 || x.Refused() != 1 {
		t.Errorf("refused: %d for the day, %d for the minute, %d in all; want exactly 1, the probe's, for the day", x.RefusedFor("day"), x.RefusedFor("minute"), x.Refused())
	}
	if d := resumed.Sub(end); d < 0 || d >= time.Minute {
		t.Errorf("resumed %v after Xero's reset; want within a minute", d)
	}
}

// fmtAfter lists instants relative to end.
func fmtAfter(ats []time.Time, end time.Time) string {
	s := ""
	for _, at := range ats {
		s += fmt.Sprintf(" %v", at.Sub(end))
	}
	return "[" + s + " ] from the reset"
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// learnt is a Transport over tr whose calls spend their grants at sim once tr has returned: after
// tr has learnt from the answer.
type learnt struct {
	tr  http.RoundTripper
	sim *simulation
}

func (l learnt) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.tr.RoundTrip(req)
	l.sim.store.mu.Lock()
	l.sim.store.pending -= 2
	l.sim.store.mu.Unlock()
	return resp, err
}
