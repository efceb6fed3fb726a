package redisstore

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// openAIAnswer answers as OpenAI does ("Rate limits in headers",
// https://platform.openai.com/docs/guides/rate-limits): the tier's fields, all left, and a
// JSON body whose usage says 21 tokens. With fields unset, it sends none.
func openAIAnswer(fields bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if fields {
			for k, v := range map[string]string{"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "500",
				"x-ratelimit-limit-tokens": "30000", "x-ratelimit-remaining-tokens": "30000"} {
				w.Header().Set(k, v)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`)
	})
}

// TestLLMLearnedLimitsOnRedis: profiles.OpenAI(0, 0, nil) over one Redis store in two
// processes. A learns "requests" (500 a minute) and "tokens" (30 000) from its first answer
// and sends a second, charged 1 and 21 tokens once corrected. B, whose upstream sends no
// fields, reads both meters from Redis on its first request and is charged on them: the
// counters hold 2 requests and 42 tokens, seen alike from both.
func TestLLMLearnedLimitsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	st := newStore(t, srv.Client(), Options{Prefix: "llm", Clock: clk})
	newT := func(fields bool) *ratemonitor.Transport {
		tr, err := ratemonitor.New(serveIn{openAIAnswer(fields)}, append(profiles.OpenAI(0, 0, nil).Options(), ratemonitor.WithStore(st))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	a, b := newT(true), newT(false)
	var key string
	for i, tr := range []*ratemonitor.Transport{a, a, b} {
		req, _ := http.NewRequest(http.MethodPost, "https://api.openai.test/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":300}`))
		req.Header.Set("Authorization", "Bearer sk")
		key = tr.Key(req)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i, tr := range []*ratemonitor.Transport{a, b} {
		s, err := tr.Status(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range s.Meters {
			got = append(got, fmt.Sprintf("%s %v used %d", m.Meter, m.Rules[0].Rule, m.Rules[0].Used))
		}
		if want := "[requests 500/1m0s used 2 tokens 30000/1m0s used 42]"; fmt.Sprint(got) != want {
			t.Errorf("Transport %d: Status meters %v, want %v", i, got, want)
		}
	}
}
