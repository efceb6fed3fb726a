package profiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// The tier's fields the learning tests' stand-ins send, full (nothing used: the remaining
// counts raise no usage), from the vendors' pages: OpenAI's x-ratelimit-* ("Rate limits in
// headers", https://platform.openai.com/docs/guides/rate-limits), Anthropic's
// anthropic-ratelimit-* ("Response headers", https://platform.claude.com/docs/en/api/rate-limits).
var (
	openAITier = []string{"x-ratelimit-limit-requests", "500", "x-ratelimit-remaining-requests", "500", "x-ratelimit-reset-requests", "120ms",
		"x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "30000", "x-ratelimit-reset-tokens", "0s"}
	anthropicTier = []string{"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "50",
		"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "30000",
		"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "8000"}
)

// TestLLMLearnedChargesCorrected: profiles.OpenAI(0, 0, nil) and profiles.Anthropic(0, 0, 0,
// nil) learn the tier's limits from the first answer's fields (meters "requests" and "tokens";
// "requests", "input" and "output", each a minute), reported as LimitChanged events; the
// first request is not charged. The second is charged at admission and corrected from its
// usage as with the tier's figures given (TestLLMChargesCorrected): a stream closed halfway
// keeps the admission charge.
func TestLLMLearnedChargesCorrected(t *testing.T) {
	const reqBody = `{"model":"m","max_tokens":300,"stream":true,"messages":[{"role":"user","content":"` + "Hello, Claude. Hello, GPT. Hello." + `"}]}`
	chars := len(reqBody)
	openAILimits := map[string]int{"requests": 500, "tokens": 30_000}
	anthropicLimits := map[string]int{"requests": 50, "input": 30_000, "output": 8_000}
	for _, c := range []struct {
		name        string
		profile     profiles.Profile
		header      string
		tier        []string
		contentType string
		answer      string
		half        bool
		limits      map[string]int
		want        []int // used on each meter, in the order learned
	}{
		{"OpenAI/JSON", profiles.OpenAI(0, 0, nil), "Authorization", openAITier, "application/json", openAIJSON, false, openAILimits, []int{1, 21}},
		{"OpenAI/stream", profiles.OpenAI(0, 0, nil), "Authorization", openAITier, "text/event-stream", openAIStream, false, openAILimits, []int{1, 21}},
		{"OpenAI/stream closed halfway", profiles.OpenAI(0, 0, nil), "Authorization", openAITier, "text/event-stream", openAIStream, true, openAILimits, []int{1, 300}},
		{"Anthropic/JSON", profiles.Anthropic(0, 0, 0, nil), "X-Api-Key", anthropicTier, "application/json", anthropicJSON, false, anthropicLimits, []int{1, 2095, 503}},
		{"Anthropic/stream", profiles.Anthropic(0, 0, 0, nil), "X-Api-Key", anthropicTier, "text/event-stream", anthropicStream, false, anthropicLimits, []int{1, 25, 15}},
		{"Anthropic/stream closed halfway", profiles.Anthropic(0, 0, 0, nil), "X-Api-Key", anthropicTier, "text/event-stream", anthropicStream, true, anthropicLimits, []int{1, (chars + 3) / 4, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				for i := 0; i+1 < len(c.tier); i += 2 {
					w.Header().Set(c.tier[i], c.tier[i+1])
				}
				w.Header().Set("Content-Type", c.contentType)
				io.WriteString(w, c.answer)
			}))
			defer srv.Close()
			var changed []observe.Event
			obs := observe.Func(func(e observe.Event) {
				if e.Kind == observe.LimitChanged {
					changed = append(changed, e)
				}
			})
			tr, err := ratemonitor.New(srv.Client().Transport, append(c.profile.Options(), ratemonitor.WithClock(clk), ratemonitor.WithObserver(obs))...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var key string
			for i := range 2 {
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(reqBody))
				req.Header.Set(c.header, "secret")
				key = tr.Key(req)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if c.half && i == 1 {
					io.ReadFull(resp.Body, make([]byte, len(c.answer)/2))
				} else {
					io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}
			if len(changed) != len(c.limits) {
				t.Errorf("%d LimitChanged events, want %d: %+v", len(changed), len(c.limits), changed)
			}
			for _, e := range changed {
				name, _, _ := strings.Cut(e.Key, ":")
				if e.Op != "learned" || len(e.Rules) != 1 || e.Rules[0].Limit != c.limits[name] || e.Rules[0].Rule != strconv.Itoa(c.limits[name])+"/1m0s" {
					t.Errorf("event %+v: want Op learned, rule %d a minute", e, c.limits[name])
				}
			}
			st, err := tr.Status(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Meters) != len(c.want) {
				t.Fatalf("%d meters learned, want %d: %+v", len(st.Meters), len(c.want), st.Meters)
			}
			for i, m := range st.Meters {
				if m.Rules[0].Rule.Limit != c.limits[m.Meter] {
					t.Errorf("meter %q learned a limit of %d, want %d", m.Meter, m.Rules[0].Rule.Limit, c.limits[m.Meter])
				}
				if m.Rules[0].Used != c.want[i] {
					t.Errorf("meter %q holds %d, want %d", m.Meter, m.Rules[0].Used, c.want[i])
				}
			}
		})
	}
}

// TestLLMLearnedFiguresOrNone: the LLM profiles learn only with every figure 0; some given and
// some 0 is an error at New, naming the figures.
func TestLLMLearnedFiguresOrNone(t *testing.T) {
	for _, c := range []struct {
		p    profiles.Profile
		want string
	}{
		{profiles.OpenAI(0, 30_000, nil), "rpm 0 and tpm 30000 must be at least 1: give your tier's figures for the model, or both 0 to learn them"},
		{profiles.Anthropic(50, 0, 0, nil), "rpm 50, itpm 0 and otpm 0 must be at least 1: give your tier's figures for the model, or all 0 to learn them"},
		{profiles.OpenAI(-1, -1, nil), "rpm -1 and tpm -1 must be at least 1"},
	} {
		_, err := ratemonitor.New(nil, c.p.Options()...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error containing %q", err, c.want)
		}
	}
}

// TestLLMLearnedFirstAnswerAlone: before a key's first answer, profiles.OpenAI(0, 0, nil)
// sends one request; the 19 others of 20 goroutines wait for that answer, then go paced on
// what it said: the stand-in allows 3 requests a minute and refuses none of them.
func TestLLMLearnedFirstAnswerAlone(t *testing.T) {
	clk := clock.NewManual(t0)
	var inProgress, most, sent atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := inProgress.Add(1)
		defer inProgress.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if sent.Add(1) == 1 {
			<-release // the first answer waits until the others are at the gate
		}
		w.Header().Set("x-ratelimit-limit-requests", "3")
		w.Header().Set("x-ratelimit-remaining-requests", "2")
		w.Header().Set("x-ratelimit-reset-requests", "20s")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, openAIJSON)
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(0, 0, nil).Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 20)
	for range 20 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":10}`))
			req.Header.Set("Authorization", "Bearer sk")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
	}
	for sent.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a 2nd request to go, were the gate open
	if n := sent.Load(); n != 1 {
		t.Errorf("%d requests sent before the first answer, want 1", n)
	}
	close(release)
	// The first answer said 2 of 3 left: 2 more go at once, then the others wait on the clock.
	for sent.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if n := sent.Load(); n != 3 {
		t.Errorf("%d requests sent by the first minute's end, want 3", n)
	}
	cancel()
	for range 20 {
		<-done
	}
}
