package ratemonitor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/upstreamtest"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// notLeaser is a store without cache.Leaser (as the SQLite and DynamoDB stores are).
type notLeaser struct{ cache.Store }

// send sends a GET through tr with ctx and returns the response (body open) or error.
func send(tr *Transport, ctx context.Context, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	return (&http.Client{Transport: tr}).Do(req)
}

// TestInFlightOptionsRefusedNamingTheOption: bad n, the app option without app rules, a too short
// lease, a lease without a limit and a store that holds no leases are errors at New naming the
// option.
func TestInFlightOptionsRefusedNamingTheOption(t *testing.T) {
	m, err := cache.NewMemory(cache.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithInFlight(0)}, "WithInFlight(0): want at least 1"},
		{[]Option{WithInFlight(-3)}, "WithInFlight(-3): want at least 1"},
		{[]Option{WithAppInFlight(0)}, "WithAppInFlight(0): want at least 1"},
		{[]Option{WithAppInFlight(2)}, "WithAppInFlight(2) needs WithAppRules"},
		{[]Option{WithInFlight(1), WithInFlightLease(time.Millisecond)}, "WithInFlightLease(1ms): want at least 100ms"},
		{[]Option{WithInFlightLease(time.Second)}, "WithInFlightLease: without WithInFlight"},
		{[]Option{WithMeter(Meter{Name: "org", InFlight: -1})}, `WithMeter("org"): InFlight -1 is negative`},
		{[]Option{WithMeter(Meter{Name: "org"})}, `WithMeter("org"): no rules and no InFlight`},
		{[]Option{WithMeter(Meter{Name: "org", InFlight: 1}), WithMeter(Meter{Name: "org", InFlight: 2})}, `WithMeter("org"): a meter named "org" is already set`},
		{[]Option{WithMeter(Meter{Name: "org", InFlight: 2}), WithStore(notLeaser{m})}, `WithMeter("org").InFlight: the store (ratemonitor.notLeaser) holds no in-flight leases`},
		{[]Option{WithInFlight(5), WithStore(notLeaser{m})}, "WithInFlight(5): the store (ratemonitor.notLeaser) holds no in-flight leases (cache.Leaser); use the memory store (cache.Memory) or the Redis store (redisstore)"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, err := New(nil, append([]Option{WithRules(minute)}, c.opts...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v, want an error containing %q", err, c.want)
			}
		})
	}
	// The whole message, over a store that holds no leases (the SQLite store's refusal is
	// checked in cache/sqlitestore/internal/transporttest).
	want := "ratemonitor: WithInFlight(5): the store (ratemonitor.notLeaser) holds no in-flight leases (cache.Leaser); use the memory store (cache.Memory) or the Redis store (redisstore)"
	if _, err := New(nil, WithRules(minute), WithStore(notLeaser{m}), WithInFlight(5)); err == nil || err.Error() != want {
		t.Errorf("New over a store without leases: %v, want %q", err, want)
	}
}

// TestInFlightSlotHeldUntilTheBodyEnds: a slot is held until the body is closed or read to EOF; a
// waiter, in monitoring mode, is woken by a local release without the clock moving; a body-less
// response frees at once; a request error frees; a cancelled waiter holds nothing.
func TestInFlightSlotHeldUntilTheBodyEnds(t *testing.T) {
	clk := clock.NewManual(t0)
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, nil, WithRules(minute), WithClock(clk), WithInFlight(2))
	ctx := context.Background()
	a, err := send(tr, ctx, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := send(tr, ctx, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.InFlight(key); got != 2 {
		t.Fatalf("InFlight with two bodies open: %d, want 2", got)
	}
	third := make(chan *http.Response, 1)
	go func() {
		r, err := send(tr, ctx, up.URL)
		if err != nil {
			t.Error(err)
		}
		third <- r
	}()
	waitFor(t, "the third request to queue", func() bool { return tr.Queued(inflightQueue+key) == 1 })
	// A cancelled waiter behind it leaves nothing held and nothing queued.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := send(tr, cctx, up.URL); errc <- err }()
	waitFor(t, "the fourth request to queue", func() bool { return tr.Queued(inflightQueue+key) == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	if q, n := tr.Queued(inflightQueue+key), tr.InFlight(key); q != 1 || n != 2 {
		t.Fatalf("after the cancel: %d queued, %d in flight, want 1 and 2", q, n)
	}
	select {
	case <-third:
		t.Fatal("third request sent with two in flight")
	default:
	}
	io.ReadAll(a.Body) // read to EOF frees a's slot, before Close
	r := <-third
	if got := tr.InFlight(key); got != 2 {
		t.Fatalf("after a's EOF and the third's send: InFlight %d, want 2", got)
	}
	a.Body.Close()
	b.Body.Close()
	r.Body.Close()
	r.Body.Close() // twice frees once
	if got := tr.InFlight(key); got != 0 {
		t.Fatalf("all bodies closed: InFlight %d, want 0", got)
	}
	// HEAD: no body, nothing held after the return.
	req, _ := http.NewRequest(http.MethodHead, up.URL, nil)
	h, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if h.Body != http.NoBody || tr.InFlight(key) != 0 {
		t.Errorf("HEAD: body %T, InFlight %d, want http.NoBody and 0", h.Body, tr.InFlight(key))
	}
	// A request that fails at the base frees its slot.
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer dead.Close()
	dkey := strings.TrimPrefix(dead.URL, "http://")
	if _, err := send(tr, ctx, dead.URL); err == nil {
		t.Fatal("a hijacked and closed connection gave no error")
	}
	if got := tr.InFlight(dkey); got != 0 {
		t.Errorf("after a base error: InFlight %d, want 0", got)
	}
	// Every lease is back in the store: two fit again under limit 2.
	for range 2 {
		if l, err := tr.Store().(cache.Leaser).AcquireLease(ctx, key, 2, time.Second); err != nil || !l.Acquired() {
			t.Fatalf("store after all closed: %+v %v, want a free slot", l, err)
		}
	}
}

// TestInFlightPacedDeadlineRefusesAtOnceOrWaitsForTheSlot: under pacing, a request whose in-flight
// slot is taken and whose rate needs a wait past its deadline fails at once with a *DeadlineError;
// one whose rate has room waits for the slot and ends with the context's error; neither holds
// anything after.
func TestInFlightPacedDeadlineRefusesAtOnceOrWaitsForTheSlot(t *testing.T) {
	clk := clock.NewManual(t0)
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	for _, c := range []struct {
		name    string
		limit   int
		timeout time.Duration
		want    func(error) bool
	}{
		// The rate's next slot is a minute away (the manual clock never moves here), past the
		// 30 s deadline: refused at once, while the context still runs.
		{"rate past the deadline", 1, 30 * time.Second, func(err error) bool {
			var de *DeadlineError
			return errors.As(err, &de) && de.Wait == time.Minute
		}},
		// The rate has room: the request waits for the slot until its context ends.
		{"rate with room", 10, 100 * time.Millisecond, func(err error) bool {
			var de *DeadlineError
			return errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &de)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTransport(t, nil, WithRules(strategy.Rule{Limit: c.limit, Window: time.Minute}), WithClock(clk), WithPacing(), WithInFlight(1))
			a, err := send(tr, context.Background(), up.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Body.Close()
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			_, err = send(tr, ctx, up.URL)
			ended := ctx.Err()
			cancel()
			if !c.want(err) {
				t.Errorf("limit %d: %v, want the other kind of error", c.limit, err)
			}
			if c.limit == 1 && ended != nil {
				t.Errorf("limit 1: the DeadlineError came once the context had ended (%v), want it at once", ended)
			}
			if n, q, used := tr.InFlight(key), tr.Queued(inflightQueue+key), usedOf(t, tr, key)[0]; n != 1 || q != 0 || used != 1 {
				t.Errorf("limit %d: InFlight %d, Queued %d, used %d, want 1, 0, 1 (only a's)", c.limit, n, q, used)
			}
		})
	}
}

// TestInFlightAppSlotsSharedByEveryKey: the app key's slots are shared by every key; InFlight
// reports them.
func TestInFlightAppSlotsSharedByEveryKey(t *testing.T) {
	clk := clock.NewManual(t0)
	up, _, _ := upstreamtest.InFlight(t)
	tr := newTransport(t, nil, WithRules(minute), WithClock(clk), WithPacing(), WithKeyFunc(KeyByHeader("Tenant", nil)),
		WithAppRules("app", minute), WithInFlight(5), WithAppInFlight(1))
	get := func(ctx context.Context, tenant string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
		req.Header.Set("Tenant", tenant)
		return (&http.Client{Transport: tr}).Do(req)
	}
	a, err := get(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if tr.InFlight("a") != 1 || tr.InFlight("app") != 1 {
		t.Fatalf("InFlight a %d, app %d, want 1 and 1", tr.InFlight("a"), tr.InFlight("app"))
	}
	done := make(chan error, 1)
	go func() {
		r, err := get(context.Background(), "b")
		if err == nil {
			r.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "b to wait for the app slot", func() bool { return tr.Queued(meterInflightQueue+"app\x00app") == 1 })
	if tr.InFlight("b") != 1 {
		t.Errorf("b waiting for the app slot holds its own: InFlight %d, want 1", tr.InFlight("b"))
	}
	a.Body.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tr.InFlight("a")+tr.InFlight("b")+tr.InFlight("app") != 0 {
		t.Errorf("all done: InFlight a %d, b %d, app %d, want 0", tr.InFlight("a"), tr.InFlight("b"), tr.InFlight("app"))
	}
}

// TestQueuedCountsInFlightWaiters: Queued(key) ("how many requests are waiting for a slot on
// key", the only figure a dashboard has for waiters) counts the requests waiting for an
// in-flight slot too: with WithInFlight(1) and one request holding the slot, three more wait,
// and Queued says 3 (it said 0 before issue 15's fix).
func TestQueuedCountsInFlightWaiters(t *testing.T) {
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	tr := newTransport(t, nil, WithRules(minute), WithPacing(), WithInFlight(1))
	first, err := send(tr, context.Background(), up.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := send(tr, ctx, up.URL); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "3 requests to wait for the in-flight slot", func() bool { return tr.Queued(inflightQueue+key) == 3 })
	got := tr.Queued(key)
	cancel()
	wg.Wait()
	first.Body.Close()
	if got != 3 {
		t.Errorf("Queued(%q) = %d with 3 requests waiting for its in-flight slot, want 3", key, got)
	}
}

// TestInFlightNeverAboveTheLimitUnderConcurrency: 24 goroutines × 5 requests through one Transport
// with WithInFlight(3) (paced and not): the upstream never sees more than 3 at once, and every
// request succeeds.
func TestInFlightNeverAboveTheLimitUnderConcurrency(t *testing.T) {
	for _, paced := range []bool{false, true} {
		t.Run(map[bool]string{false: "monitoring", true: "paced"}[paced], func(t *testing.T) {
			up, _, most := upstreamtest.InFlight(t)
			opts := []Option{WithRules(strategy.Rule{Limit: 1000, Window: time.Minute}), WithInFlight(3)}
			if paced {
				opts = append(opts, WithPacing())
			}
			tr := newTransport(t, nil, opts...)
			upstreamtest.ConcurrentRun(t, []*Transport{tr}, up.URL, 24, 5)
			if most.Load() > 3 || most.Load() < 1 {
				t.Errorf("paced %v: the upstream saw %d in flight at most, want 1..3", paced, most.Load())
			}
		})
	}
}

// TestInFlightStackedHoldsOneSlotPerRequest: two Transports stacked over one store, both
// WithInFlight(2) on the same key, hold one slot per request (the outer's), not one per layer: two
// bodies open at once, the inner holding none; a third waits.
func TestInFlightStackedHoldsOneSlotPerRequest(t *testing.T) {
	clk := clock.NewManual(t0)
	m, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	up, _, _ := upstreamtest.InFlight(t)
	key := strings.TrimPrefix(up.URL, "http://")
	inner := newTransport(t, nil, WithRules(strategy.Rule{Limit: 100, Window: time.Hour}), WithStore(m), WithInFlight(2))
	outer := newTransport(t, inner, WithRules(minute), WithStore(m), WithInFlight(2))
	// With a slot per layer, b would wait for ever: waitLimit bounds it.
	bounded, stop := context.WithTimeout(context.Background(), waitLimit)
	defer stop()
	a, err := send(outer, bounded, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := send(outer, bounded, up.URL)
	if err != nil {
		t.Fatalf("b with a's body open: %v, want sent (one slot per request, not per layer)", err)
	}
	if o, i := outer.InFlight(key), inner.InFlight(key); o != 2 || i != 0 {
		t.Fatalf("InFlight outer %d, inner %d, want 2 and 0", o, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if _, err := send(outer, ctx, up.URL); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("third: %v, want it to wait (and time out)", err)
	}
	cancel()
	a.Body.Close()
	b.Body.Close()
	if o := outer.InFlight(key); o != 0 {
		t.Errorf("after the bodies: InFlight %d, want 0", o)
	}
}

// TestInFlightMeterCapsEveryKeyOfItsKey: a Meter with InFlight 2 whose key is a request key's
// organisation (its first letter) lets at most 2 requests of the organisation's keys be in
// progress at once: a1 and a2 hold them, a3 waits until a1's body is closed, and b1, of
// another organisation, goes at once. It keeps no rate rules: nothing is counted on it.
func TestInFlightMeterCapsEveryKeyOfItsKey(t *testing.T) {
	up, _, _ := upstreamtest.InFlight(t)
	org := func(key string) string { return "org:" + key[:1] }
	tr := newTransport(t, nil, WithRules(minute), WithPacing(), WithKeyFunc(KeyByHeader("Tenant", nil)),
		WithMeter(Meter{Name: "org", Key: org, InFlight: 2}))
	get := func(ctx context.Context, tenant string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
		req.Header.Set("Tenant", tenant)
		return (&http.Client{Transport: tr}).Do(req)
	}
	var open []*http.Response
	for _, k := range []string{"a1", "a2", "b1"} {
		resp, err := get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
	}
	if tr.InFlight("org:a") != 2 || tr.InFlight("org:b") != 1 {
		t.Fatalf("InFlight org:a %d, org:b %d; want 2 and 1", tr.InFlight("org:a"), tr.InFlight("org:b"))
	}
	done := make(chan error, 1)
	go func() {
		r, err := get(context.Background(), "a3")
		if err == nil {
			r.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "a3 to wait for its organisation's slot", func() bool { return tr.Queued(meterInflightQueue+"org\x00org:a") == 1 })
	select {
	case err := <-done:
		t.Fatalf("a3 went (%v) while a1 and a2 were in progress", err)
	default:
	}
	open[0].Body.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, r := range open[1:] {
		r.Body.Close()
	}
	if n := tr.InFlight("org:a") + tr.InFlight("org:b"); n != 0 {
		t.Errorf("all done: %d slots of the organisations held, want 0", n)
	}
	if st, err := tr.Status(context.Background(), "a1"); err != nil || len(st.Meters) != 0 || st.Rules[0].Used != 1 {
		t.Errorf("Status(a1): %+v, %v; want 1 counted on its key and no rate meter", st, err)
	}
}
