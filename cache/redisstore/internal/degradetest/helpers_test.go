package degradetest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	t0      = time.Unix(1_800_000_000, 0)
	minute  = strategy.Rule{Limit: 60, Window: time.Minute}
	discard = slog.New(slog.DiscardHandler)
)

// newTransport is ratemonitor.New, closed at the end of the test.
func newTransport(t *testing.T, base http.RoundTripper, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	tr, err := ratemonitor.New(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// doKey sends one GET on key through tr.
func doKey(tr *ratemonitor.Transport, ctx context.Context, key string) error {
	req, _ := http.NewRequestWithContext(ratemonitor.WithKey(ctx, key), http.MethodGet, "http://example.invalid/", nil)
	resp, err := tr.RoundTrip(req)
	if resp != nil {
		resp.Body.Close()
	}
	return err
}

// fleetStore is a real Redis store that says how many processes share it
// (cache.Traits.Processes), as the Redis store's heartbeat will.
type fleetStore struct {
	*redisstore.Store
	n int
}

func (f fleetStore) Processes() int { return f.n }

// Describe is the store's, but for Processes.
func (f fleetStore) Describe() cache.Traits {
	tr := f.Store.Describe()
	tr.Processes = f.Processes
	return tr
}

func newRedisStore(t *testing.T, srv *redistest.Server) *redisstore.Store {
	t.Helper()
	return newRedisStoreWith(t, srv, redisstore.Options{})
}

// newRedisStoreWith is newRedisStore with options.
func newRedisStoreWith(t *testing.T, srv *redistest.Server, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	st, err := redisstore.New(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// rolling is the strategy WithRules(rules...) builds (a rolling window): the one whose
// counters the Transport keeps in the store, to read them there directly.
func rolling(t *testing.T, rules ...strategy.Rule) *engine.Strategy {
	t.Helper()
	s, err := rollingwindow.New(rules...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// usedIn returns how many requests the store st counts on key in s's first rule, asked of
// the store directly (not through a Transport's degraded mode).
func usedIn(t *testing.T, st *redisstore.Store, s *engine.Strategy, key string) int {
	t.Helper()
	snap, err := st.Peek(context.Background(), s, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Usage[0].Used
}

// kinds returns the Degraded and Recovered events among evs, as strings.
func kinds(evs []observe.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == observe.Degraded || e.Kind == observe.Recovered {
			out = append(out, e.Kind.String())
		}
	}
	return out
}

// answer is what one store reserve made for a caller said: granted, or refused with a wait.
type answer struct {
	allowed bool
	wait    time.Duration
}

// reserveOnce asks tr, paced on the manual clock clk and observed by rec, for one slot on key
// (Transport.Reserve) and returns the answer of its first store reserve, as the Granted or
// Refused event says it. A granted slot stays reserved (counted, as a grant is); a refused
// caller is cancelled once it sleeps on clk (so that no store call of it is under way when
// this returns), and nothing is recorded for it. Reserve asks the store once more, after it
// joins the key's queue, before it sleeps: at the same instant of clk that second ask finds
// what the first did and changes nothing.
func reserveOnce(t *testing.T, tr *ratemonitor.Transport, rec *observetest.Recorder, clk *clock.Manual, key string) answer {
	t.Helper()
	from := len(rec.Events())
	sleepers := clk.Sleepers()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := tr.Reserve(ctx, key, 1)
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		evs := rec.Events()[from:]
		i := slices.IndexFunc(evs, func(e observe.Event) bool {
			return e.Key == key && (e.Kind == observe.Granted || e.Kind == observe.Refused)
		})
		if i >= 0 && evs[i].Kind == observe.Granted {
			if err := <-done; err != nil {
				t.Fatalf("Reserve granted, then returned %v", err)
			}
			return answer{allowed: true}
		}
		if i >= 0 && clk.Sleepers() > sleepers {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("refused Reserve, cancelled while it slept: %v, want context.Canceled", err)
			}
			return answer{wait: evs[i].Wait}
		}
		select {
		case err := <-done:
			// Reserve may have been granted (its event recorded) after the events were read
			// above: look again before calling its return early.
			granted := slices.ContainsFunc(rec.Events()[from:], func(e observe.Event) bool { return e.Key == key && e.Kind == observe.Granted })
			if err == nil && granted {
				return answer{allowed: true}
			}
			t.Fatalf("Reserve returned %v before its store answered", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Reserve on %q: no store answer within 30 s (events %v)", key, rec.Strings())
		}
	}
}

// okBase answers every request with 200 at once, and notes when each arrived.
type okBase struct {
	mu   sync.Mutex
	sent []time.Time
}

func (b *okBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (b *okBase) count() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.sent) }

// between counts the requests that arrived in [from, to).
func (b *okBase) between(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sent {
		if !s.Before(from) && s.Before(to) {
			n++
		}
	}
	return n
}

// clockBase is a base RoundTripper that logs the manual clock's instant of every request it is
// given: what the upstream would see.
type clockBase struct {
	clk  *clock.Manual
	mu   sync.Mutex
	sent []time.Time
}

func (b *clockBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.sent = append(b.sent, b.clk.Now())
	b.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

func (b *clockBase) instants() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sent)
}

// waitRedisRedialed waits until go-redis's pools have dialled a restarted server: a pool
// whose dials all failed starts a goroutine (ConnPool.tryDial, go-redis v9.23.0
// internal/pool/pool.go) that tries again every second until one succeeds, which goleak
// would see if the test ended first.
func waitRedisRedialed(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	// 30 s: a redial takes a second idle, far longer on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "ConnPool).tryDial") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("go-redis still redials the restarted server after 30 s")
		}
	}
}
