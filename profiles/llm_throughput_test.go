package profiles_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// The tiers of the throughput tests: OpenAI's tokens bind (about 10 000 tokens a request: 20
// a minute, far below 500 requests); Anthropic's input tokens bind (about 40 requests a
// minute, using about 40 000 of the 80 000 output tokens).
const (
	openAIRPM, openAITPM                       = 500, 200_000
	anthropicRPM, anthropicITPM, anthropicOTPM = 1000, 400_000, 80_000
	llmRun                                     = 3 * time.Minute
	llmGoroutines                              = 20
)

// llmPrompt is request i's prompt, in the stand-ins' tokens (4 characters each): from 100 to
// 20 000, spread over the range; and its answer's output tokens, from 50 to 2000.
func llmPrompt(i int) (prompt, output int) {
	return 100 + (i*7919)%19_901, 50 + (i*104_729)%1951
}

// llmRequest is request i to url for model, with the credential header, as the vendor's body.
func llmRequest(t *testing.T, url, header, credential string, i int, stream bool) *http.Request {
	prompt, output := llmPrompt(i)
	body := map[string]any{"model": "model-test", "max_tokens": 2048,
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("abcd", prompt)}}}
	if stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(header, credential)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Standin-Output-Tokens", strconv.Itoa(output))
	return req
}

// arrivedKey is the context key of a request's arrival mark (llmGate).
type arrivedKey struct{}

// grantsKey is the context key of the grants a request takes (none for a request sent before
// its key's first answer, with no limit known).
type grantsKey struct{}

// llmGate is the simulation's store for the LLM runs: a Release of a request whose grants have
// arrived at the stand-in (a correction giving tokens back, after the answer) is not a grant
// given back before the send, and leaves the count of grants in transit alone.
type llmGate struct{ *grantGate }

func (g llmGate) Release(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
	if a, _ := ctx.Value(arrivedKey{}).(*atomic.Bool); a != nil && a.Load() {
		return g.Memory.Release(ctx, s, key, at, n)
	}
	return g.grantGate.Release(ctx, s, key, at, n)
}

// busyKey is the context key of a request's busyMark.
type busyKey struct{}

// busyMark marks a request whose goroutine holds the clock (a count in the simulation's
// pending) until the Transport has priced it: building a request and pricing it read a body of
// up to 80 kB several times, real time in which virtual time must not pass.
type busyMark struct{ released atomic.Bool }

// llmTransport serves the stand-in in process. An answer holds the clock from its end (the
// stand-in's service time over, or a refusal) until its goroutine has read it and priced its
// next request: its usage corrects the charges when read, and a clock that moved in between
// would pace on counts the stand-in has already corrected.
type llmTransport struct {
	h   http.Handler
	sim *simulation
}

func (rt llmTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := recorderTransport{rt.h}.RoundTrip(req)
	if err == nil && resp.StatusCode != http.StatusOK { // no service time: held from here
		rt.sim.store.mu.Lock()
		rt.sim.store.pending++
		rt.sim.store.mu.Unlock()
	}
	return resp, err
}

// runLLM sends requests from llmGoroutines goroutines through a Transport made of profile
// against the stand-in newStandIn makes (on the simulation's clock, sleeping its service time
// there, calling admitted once it has admitted or refused a request, whose grants numbered
// grants) for llmRun of virtual time, reading each answer to its end. A profile without
// rules learns its limits: its first request is neither priced nor charged.
func runLLM(t *testing.T, profile profiles.Profile, grants int,
	newStandIn func(now func() time.Time, sleep func(time.Duration), admitted func(*http.Request)) http.Handler,
	mk func(i int) *http.Request) {
	sim := newSimulation(t)
	// A goroutine that priced its request lets the clock go before it reserves: the clock
	// moves once nothing was pending for 4 polls in a row, so that one the scheduler left out
	// for a moment still reserves at the instant it priced at.
	sim.quiet = 4
	hold := func(n int) {
		sim.store.mu.Lock()
		sim.store.pending += n
		sim.store.mu.Unlock()
	}
	// the answer's end holds the clock (released when its goroutine has priced the next)
	sleep := func(d time.Duration) { sim.clk.Sleep(context.Background(), d); hold(1) }
	admitted := func(r *http.Request) {
		r.Context().Value(arrivedKey{}).(*atomic.Bool).Store(true)
		hold(-r.Context().Value(grantsKey{}).(int))
	}
	h := newStandIn(sim.clk.Now, sleep, admitted)
	// The last meter's Cost is the last thing the Transport computes before it reserves or
	// waits: the request's goroutine lets the clock go from there.
	last := profile.Meters[len(profile.Meters)-1]
	price := last.Cost
	last.Cost = func(req *http.Request) int {
		n := price(req)
		if m, _ := req.Context().Value(busyKey{}).(*busyMark); m != nil && m.released.CompareAndSwap(false, true) {
			hold(-1)
		}
		return n
	}
	profile.SetMeter(last)
	tr, err := ratemonitor.New(llmTransport{h, sim}, append(profile.Options(),
		ratemonitor.WithClock(sim.clk), ratemonitor.WithStore(llmGate{sim.store}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	defer sim.run()()
	end := sim.clk.Now().Add(llmRun)
	c := &http.Client{Transport: tr}
	var next atomic.Int64
	// send sends the next request and reads its answer. The goroutine holds the clock when it
	// calls send (while it builds and prices the request) and again when send returns (from the
	// answer's end), unless send fails.
	send := func(grants int) error {
		i := int(next.Add(1)) - 1
		req := mk(i)
		ctx := context.WithValue(req.Context(), grantsKey{}, grants)
		ctx = context.WithValue(ctx, arrivedKey{}, new(atomic.Bool))
		req = req.WithContext(context.WithValue(ctx, busyKey{}, new(busyMark)))
		resp, err := c.Do(req)
		if err != nil {
			hold(-1) // the hold taken for this request, released nowhere else
			return fmt.Errorf("request %d: %w", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil
	}
	// The first request goes alone: the others would wait for its answer at the first-answer
	// gate (SyncConfig.FirstAnswer) before they are priced, holding the clock its service time
	// needs. Without rules it is not priced: nothing holds the clock until it is sent.
	// Nor charged: it takes no grants.
	first := grants
	if len(profile.Rules) == 0 {
		first = 0
	} else {
		hold(1)
	}
	if err := send(first); err != nil {
		t.Fatal(err)
	}
	hold(-1)            // its answer's hold: no next request on this goroutine
	hold(llmGoroutines) // each goroutine holds the clock while it builds its first request
	var wg sync.WaitGroup
	errs := make(chan error, llmGoroutines)
	for range llmGoroutines {
		wg.Go(func() {
			for sim.clk.Now().Before(end) {
				if err := send(grants); err != nil {
					errs <- err
					return
				}
			}
			hold(-1) // the hold of the last answer read
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestOpenAIHoldsTokensAndRequests: 20 goroutines send chat completions of 100 to 20 000
// prompt tokens (max_tokens 2048, answers of 50 to 2000 tokens) on one key and model through
// profiles.OpenAI(500, 200 000) to a stand-in written from OpenAI's guide, for 3 minutes of
// virtual time: none is refused, and the answers to the requests admitted in those 3 minutes
// used at least 90 % of the 600 000 tokens the binding limit (tokens) allows in them. Run
// with -v for the figures.
func TestOpenAIHoldsTokensAndRequests(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			testOpenAI(t, profiles.OpenAI(openAIRPM, openAITPM, nil), stream)
		})
	}
}

// TestOpenAILearnsItsLimits: as TestOpenAIHoldsTokensAndRequests through profiles.OpenAI(0, 0,
// nil), which learns the tier's limits from the x-ratelimit-* fields of the key's first answer.
func TestOpenAILearnsItsLimits(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			testOpenAI(t, profiles.OpenAI(0, 0, nil), stream)
		})
	}
}

func testOpenAI(t *testing.T, p profiles.Profile, stream bool) {
	var o *standin.OpenAI
	runLLM(t, p, 2,
		func(now func() time.Time, sleep func(time.Duration), admitted func(*http.Request)) http.Handler {
			o = standin.NewOpenAI(now, openAIRPM, openAITPM)
			o.Sleep, o.Admitted = sleep, admitted
			return o
		},
		func(i int) *http.Request {
			return llmRequest(t, "http://api.openai.test/v1/chat/completions", "Authorization", "Bearer sk-test", i, stream)
		})
	n, in, out := o.Used(t0.Add(llmRun))
	share := 100 * float64(in+out) / float64(3*openAITPM)
	t.Logf("%d answers admitted in %v, %d refused: %d input + %d output = %d tokens, %.1f %% of the %d allowed; %.1f %% of the %d requests allowed",
		n, llmRun, o.Refused(), in, out, in+out, share, 3*openAITPM, 100*float64(n)/float64(3*openAIRPM), 3*openAIRPM)
	if o.Refused() != 0 {
		t.Errorf("%d requests refused; want none", o.Refused())
	}
	if share < 90 {
		t.Errorf("%.1f %% of the tokens allowed used; want at least 90 %%", share)
	}
}

// TestAnthropicHoldsInputOutputAndRequests: as TestOpenAIHoldsTokensAndRequests, through
// profiles.Anthropic(1000, 400 000, 80 000) to a stand-in written from Anthropic's page: none
// is refused, and the input tokens (binding) of the answers to the requests admitted in the
// 3 minutes are at least 90 % of the 1 200 000 allowed; output stays within its limit.
func TestAnthropicHoldsInputOutputAndRequests(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			testAnthropic(t, profiles.Anthropic(anthropicRPM, anthropicITPM, anthropicOTPM, nil), stream)
		})
	}
}

// TestAnthropicLearnsItsLimits: as TestAnthropicHoldsInputOutputAndRequests through
// profiles.Anthropic(0, 0, 0, nil), which learns the tier's limits from the
// anthropic-ratelimit-* fields of the key's first answer.
func TestAnthropicLearnsItsLimits(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			testAnthropic(t, profiles.Anthropic(0, 0, 0, nil), stream)
		})
	}
}

func testAnthropic(t *testing.T, p profiles.Profile, stream bool) {
	var a *standin.Anthropic
	runLLM(t, p, 3,
		func(now func() time.Time, sleep func(time.Duration), admitted func(*http.Request)) http.Handler {
			a = standin.NewAnthropic(now, anthropicRPM, anthropicITPM, anthropicOTPM)
			a.Sleep, a.Admitted = sleep, admitted
			return a
		},
		func(i int) *http.Request {
			return llmRequest(t, "http://api.anthropic.test/v1/messages", "X-Api-Key", "sk-ant-test", i, stream)
		})
	n, in, out := a.Used(t0.Add(llmRun))
	share := 100 * float64(in) / float64(3*anthropicITPM)
	t.Logf("%d answers admitted in %v, %d refused: %d input tokens, %.1f %% of the %d allowed; %d output tokens, %.1f %% of the %d allowed; %.1f %% of the %d requests allowed",
		n, llmRun, a.Refused(), in, share, 3*anthropicITPM, out, 100*float64(out)/float64(3*anthropicOTPM), 3*anthropicOTPM, 100*float64(n)/float64(3*anthropicRPM), 3*anthropicRPM)
	if a.Refused() != 0 {
		t.Errorf("%d requests refused; want none", a.Refused())
	}
	if share < 90 {
		t.Errorf("%.1f %% of the input tokens allowed used; want at least 90 %%", share)
	}
}
