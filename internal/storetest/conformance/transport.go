package conformance

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// upstream is an httptest server that notes when each request arrived, by the sequence number
// the suite's base RoundTripper puts on it.
type upstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	arrivals map[int64]time.Time
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{arrivals: map[int64]time.Time{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		seq, _ := strconv.ParseInt(r.Header.Get("X-Seq"), 10, 64)
		u.mu.Lock()
		u.arrivals[seq] = at
		u.mu.Unlock()
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// send is one request the Transport passed to its base RoundTripper.
type send struct {
	granted bool      // the store granted its slot (the recorder saw it in the request's context)
	grant   time.Time // the store's instant for it
	seq     int64
}

// base is the RoundTripper under the Transport: it notes each request sent and whether the
// store had counted it, then sends it to the upstream.
type base struct {
	next  http.RoundTripper
	seq   atomic.Int64
	mu    sync.Mutex
	sends []send
}

func (b *base) RoundTrip(req *http.Request) (*http.Response, error) {
	sd := send{seq: b.seq.Add(1)}
	if g, ok := req.Context().Value(tagKey{}).(*tag); ok {
		sd.grant, sd.granted = g.get()
	}
	b.mu.Lock()
	b.sends = append(b.sends, sd)
	b.mu.Unlock()
	req = req.Clone(req.Context())
	req.Header.Set("X-Seq", strconv.FormatInt(sd.seq, 10))
	return b.next.RoundTrip(req)
}

// load is what one run of paced goroutines through a Transport saw.
type load struct {
	s         *engine.Strategy
	grants    []Grant         // the store's grants (Result.At), less any released
	waits     []time.Duration // the waits the store told
	sends     []send
	arrivals  []Grant // every request that reached the upstream, at its arrival
	slack     time.Duration
	uncounted int   // sent without the store having counted them
	storeErrs int   // store operations that failed
	failed    int   // requests RoundTrip refused with a store error (SendNothing)
	last      error // the last request's error after the run (nil: admitted)
	lastTook  time.Duration
}

// runLoad paces 64 goroutines' requests through a Transport over rec (WithPacing, policy) on
// key for d; a goroutine whose request fails with a store error backs off 5 ms. After the run
// one more request is sent, with the strategy's longest window and liveWithin to be admitted
// in. It may run on a goroutine other than the test's.
func runLoad(t *testing.T, rec *recorder, s *engine.Strategy, key string, policy ratemonitor.StoreErrorPolicy, d time.Duration, faultOver <-chan struct{}) load {
	up := newUpstream(t)
	hc := &http.Transport{MaxIdleConnsPerHost: goroutines}
	t.Cleanup(hc.CloseIdleConnections)
	b := &base{next: hc}
	tr, err := ratemonitor.New(b, ratemonitor.WithPacing(), ratemonitor.WithStore(rec), ratemonitor.WithStrategy(s),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return key }), ratemonitor.WithStoreErrorPolicy(policy),
		ratemonitor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Errorf("ratemonitor.New: %v", err) // Errorf: runLoad may run on a goroutine of its own
		return load{s: s}
	}
	client := &http.Client{Transport: tr}
	var failed atomic.Int64
	do := func(ctx context.Context) (bool, error) {
		g := &tag{}
		req, _ := http.NewRequestWithContext(context.WithValue(ctx, tagKey{}, g), http.MethodGet, up.srv.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		_, granted := g.get()
		return granted, err
	}
	end := time.Now().Add(d)
	runCtx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				_, err := do(runCtx)
				var se *ratemonitor.StoreError
				switch {
				case err == nil:
				case errors.As(err, &se):
					failed.Add(1)
					time.Sleep(5 * time.Millisecond) // a caller backing off from an outage
				default:
					return // the run's deadline: nothing was sent
				}
			}
		}()
	}
	wg.Wait()
	// No lockout: once the fault is over, a caller retrying after store errors is admitted
	// (counted, not merely sent under SendUncounted): within the longest window (the waits
	// told, judged by waitsInBounds), on the real clock before liveWithin more.
	if faultOver != nil {
		<-faultOver
	}
	start := time.Now()
	var lastErr error
	for {
		lastCtx, lastCancel := context.WithDeadline(context.Background(), start.Add(s.Longest()+liveWithin))
		granted, err := do(lastCtx)
		lastCancel()
		lastErr = err
		if granted || time.Since(start) > s.Longest()+liveWithin {
			if !granted && err == nil {
				lastErr = errors.New("sent without being counted")
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	hc.CloseIdleConnections()
	up.srv.Close()

	l := load{s: s, failed: int(failed.Load()), last: lastErr, lastTook: took}
	l.grants, l.waits, l.storeErrs = rec.kept()
	b.mu.Lock()
	l.sends = append(l.sends, b.sends...)
	b.mu.Unlock()
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, sd := range l.sends {
		at, ok := up.arrivals[sd.seq]
		if !ok {
			continue // the upstream never saw it (the client gave up)
		}
		l.arrivals = append(l.arrivals, Grant{At: at, N: 1})
		if !sd.granted {
			l.uncounted++
			continue
		}
		l.slack = max(l.slack, at.Sub(sd.grant))
	}
	return l
}

// ideal is the most requests the strategy's rules let through in d from an empty start: the
// tightest rule's limit per window, plus one window's limit at the start.
func ideal(s *engine.Strategy, d time.Duration) int {
	best := -1
	for _, r := range s.Rules() {
		n := r.EffectiveLimit() * int(1+d/r.EffectiveWindow())
		if s.Name() == "tokenbucket" {
			n = r.EffectiveLimit() + int(int64(r.Limit)*int64(d)/int64(r.EffectiveWindow()))
		}
		if best < 0 || n < best {
			best = n
		}
	}
	return best
}

// transport64 paces 64 goroutines through one Transport on one key for 1.2 s under the default
// policy (SendUncounted), with no fault: every grant is judged at the store's instant, every arrival
// at the upstream with the send delay measured, waits lie in [0, longest], and nothing is sent
// uncounted because of contention (a store error that is not one, a timeout on a loaded
// machine, is reported with what it let through: the test must not hang on scheduling).
func transport64(t *testing.T, tg Target, s *engine.Strategy) {
	t.Parallel() // the three strategies share the store, on their own keys
	rep := newReport(t, tg)
	defer rep.done()
	rec := &recorder{Store: tg.Open(t, nil)}
	d := dur(1200 * time.Millisecond)
	l := runLoad(t, rec, s, newKey("transport"), ratemonitor.SendUncounted, d, nil)
	rep.waitsInBounds(s, l.waits, 0)
	v := rep.violations("grants at the store's instants", s, l.grants, 0)
	av := 0
	if l.uncounted == 0 {
		av = rep.violations("arrivals at the upstream (send delay "+l.slack.String()+")", s, l.arrivals, l.slack)
	}
	// Contention is retried, not handed to the StoreErrorPolicy: only other store errors (a timeout
	// on a loaded machine) may let a request out uncounted under SendUncounted.
	if c := rec.contentions(); l.uncounted > l.storeErrs-c {
		rep.fail("%d requests were sent uncounted after %d store errors, %d of them contention: contention is not an outage", l.uncounted, l.storeErrs, c)
	}
	if l.last != nil {
		rep.fail("a request after the run: %v after %v", l.last, l.lastTook)
	}
	err, _ := rec.lastError()
	t.Logf("%s %s: %v, %d sent (ideal %d, %.0f%% granted), %d grants, %d uncounted after %d store errors (last: %v), send delay ≤ %v, %d violations at grants, %d at arrivals",
		tg.Name, s.Name(), d, len(l.sends), ideal(s, d), 100*float64(len(l.grants))/float64(ideal(s, d)), len(l.grants), l.uncounted, l.storeErrs, err, l.slack, v, av)
}
