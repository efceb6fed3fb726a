package profiles_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// githubLoad is a run of requests, every tenth a write, on one token against GitHub's stand-in.
type githubLoad struct {
	profile  []ratemonitor.Option
	graphQL  bool
	requests int
	points   int // what they cost on the secondary limit
	limit    int // the secondary points a minute
	writes   int // the content-generating requests among them
	request  func(write bool) *http.Request
}

// TestGitHubHoldsSecondaryLimits: GitHub allows a token 900 points a minute for REST and 2000
// for GraphQL besides its 5000 an hour, a write (POST, or a mutation) costing 5 points and a
// read 1, 80 writes a minute and 500 an hour, and at most 100 requests in progress
// (standin.GitHub with Secondary and Content, written from GitHub's pages; each request in
// progress for 2 ms of real time). 20 and then 150 goroutines share one token and send, every
// tenth a write: for REST 3150 requests, 4410 points (four full minutes and 810 more) and 315
// writes, the points binding; for GraphQL 3190 queries, 4466 points and 319 mutations (three
// full minutes of writes and 79 more), the writes binding. None is refused, GitHub never sees
// more than 100 in progress, and the binding limit is used at at least 95 % of what a rolling
// minute allows over the span (a margin of 1 s costs 1/61).
func TestGitHubHoldsSecondaryLimits(t *testing.T) {
	loads := map[string]githubLoad{
		"REST": {profiles.GitHubREST().Options(), false, 3150, 3150 - 315 + 315*5, profiles.GitHubMinutePoints, 315, func(write bool) *http.Request {
			req := request("http://api.github.test/repos/o/r/issues", "Authorization", "Bearer ghp_test")
			if write {
				req.Method = http.MethodPost
			}
			return req
		}},
		"GraphQL": {profiles.GitHubGraphQL(nil).Options(), true, 3190, 3190 - 319 + 319*5, profiles.GitHubGraphQLMinutePoints, 319, func(write bool) *http.Request {
			body := `{"query":"query { viewer { login } }"}`
			if write {
				body = `{"query":"mutation { addStar(input: {starrableId: \"R_1\"}) { clientMutationId } }"}`
			}
			req, _ := http.NewRequest(http.MethodPost, "http://api.github.test/graphql", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer ghp_test")
			return req
		}},
	}
	for _, api := range []string{"REST", "GraphQL"} {
		for _, goroutines := range []int{20, 150} {
			t.Run(fmt.Sprintf("%s/%d goroutines", api, goroutines), func(t *testing.T) {
				runGitHubLoad(t, loads[api], goroutines)
			})
		}
	}
}

func runGitHubLoad(t *testing.T, load githubLoad, goroutines int) {
	sim := newSimulation(t)
	gh := standin.NewGitHub(sim.clk.Now)
	gh.Secondary, gh.Content, gh.GraphQL, gh.Service = true, true, load.graphQL, 2*time.Millisecond
	// Each request is granted on its token and on its points before it is sent, and a write on
	// the content meter too (the test marks writes with X-Test-Write).
	grants := func(r *http.Request) int {
		if r.Header.Get("X-Test-Write") != "" {
			return 3
		}
		return 2
	}
	tr, err := ratemonitor.New(recorderTransport{sim.arrive(gh, grants)}, append(slices.Clone(load.profile),
		ratemonitor.WithClock(sim.clk), ratemonitor.WithStore(sim.store), ratemonitor.WithInFlightLease(time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	defer sim.run()()
	c := &http.Client{Transport: tr}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < load.requests; i = int(next.Add(1)) - 1 {
				req := load.request(i%10 == 0)
				if i%10 == 0 {
					req.Header.Set("X-Test-Write", "1")
				}
				resp, err := c.Do(req)
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
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
	n, first, last := gh.Accepted()
	span := last.Sub(first)
	minutes := int(span/time.Minute) + 1
	allowed, writesAllowed := load.limit*minutes, profiles.GitHubContentMinute*minutes
	pointsShare := 100 * float64(load.points) / float64(allowed)
	writesShare := 100 * float64(load.writes) / float64(writesAllowed)
	share := max(pointsShare, writesShare) // the binding limit's
	pointsRefused, contentRefused, inFlightRefused := gh.SecondaryRefused()
	t.Logf("%d accepted in %v (virtual): %d points, %.1f %% of the %d allowed; %d writes, %.1f %% of the %d allowed; refused: %d in all, %d for points, %d for content, %d for in progress; most in progress %d",
		n, span, load.points, pointsShare, allowed, load.writes, writesShare, writesAllowed, gh.Refused(), pointsRefused, contentRefused, inFlightRefused, gh.MaxInFlight())
	if gh.Refused() != 0 || n != load.requests {
		t.Errorf("%d accepted, %d refused (%d for points, %d for content, %d for in progress); want all %d accepted", n, gh.Refused(), pointsRefused, contentRefused, inFlightRefused, load.requests)
	}
	if most := gh.MaxInFlight(); most > profiles.GitHubInFlight {
		t.Errorf("GitHub saw %d requests of the token in progress, more than %d", most, profiles.GitHubInFlight)
	}
	if share < 95 {
		t.Errorf("in %v: %.1f %% of the points allowed and %.1f %% of the writes; want at least 95 %% of the binding limit's", span, pointsShare, writesShare)
	}
}

// simulation runs paced requests against a stand-in in simulated time: the clock moves to the
// next sleeper's deadline only while no request is between its grant in the store and its
// arrival at the stand-in, as real time would move during a transit of no length. (A clock
// that moved while requests were on their way would have them arrive a window after their
// grant, which no real network does.) The lease of an in-flight slot is an hour here, so that
// a minute's jump does not expire the slots of requests that wait for their turn.
type simulation struct {
	clk   *clock.Manual
	store *grantGate
	quiet int // how many polls in a row must find nothing pending before the clock moves
}

// grantGate is a memory store that counts the grants not yet arrived at the stand-in.
type grantGate struct {
	*cache.Memory
	mu      sync.Mutex
	pending int
}

func (g *grantGate) Reserve(ctx context.Context, s *engine.Strategy, key string, n int) (engine.Result, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	res, err := g.Memory.Reserve(ctx, s, key, n)
	if err == nil && res.Allowed {
		g.pending++
	}
	return res, err
}

func (g *grantGate) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pending-- // a grant given back (the other charge was refused): it will not arrive
	return g.Memory.Release(ctx, s, key, at, n)
}

func newSimulation(t *testing.T) *simulation {
	clk := clock.NewManual(t0)
	mem, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	return &simulation{clk: clk, store: &grantGate{Memory: mem}}
}

// arrive wraps the stand-in h: each request r that reaches it had grants(r) grants.
func (s *simulation) arrive(h http.Handler, grants func(*http.Request) int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := grants(r)
		h.ServeHTTP(w, r) // the stand-in reads the clock first, then the grants are spent
		s.store.mu.Lock()
		s.store.pending -= n
		s.store.mu.Unlock()
	})
}

// run moves the clock until the returned func is called. While requests hold in-flight slots,
// one sleeper is the Transport's lease renewal, whose deadline is far off: a jump to it while a
// request could go now would waste time, so the clock moves when someone else sleeps too (the
// pacing queue's head, waiting for room, or a waiter for an in-flight slot), or, should the
// renewal not run, when a lone sleeper has slept alone for 200 polls. Either way only after
// s.quiet polls in a row (at least 1) with nothing pending: a goroutine between two holds (a
// request priced, not yet reserved) is not seen, and on a loaded machine it may not run for a
// while.
func (s *simulation) run() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		alone, quiet := 0, 0
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Microsecond):
			}
			s.store.mu.Lock()
			next, ok := s.clk.Next()
			if ok && s.store.pending == 0 {
				quiet++
			} else {
				quiet = 0
			}
			if ok && s.store.pending == 0 && s.clk.Sleepers() == 1 {
				alone++
			} else {
				alone = 0
			}
			if quiet >= max(s.quiet, 1) && (s.clk.Sleepers() >= 2 || alone > 200) {
				s.clk.Set(next)
				alone, quiet = 0, 0
			}
			s.store.mu.Unlock()
		}
	}()
	return func() { close(done); <-stopped }
}
