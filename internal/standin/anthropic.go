package standin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Anthropic stands in for the Claude Messages endpoint, as Anthropic's "Rate limits" page
// describes its limits (https://platform.claude.com/docs/en/api/rate-limits; its translations
// at https://docs.anthropic.com/<language>/api/rate-limits):
//
//   - requests per minute (RPM), input tokens per minute (ITPM) and output tokens per minute
//     (OTPM), apart, applied separately for each model: here per model, for one API key;
//   - each kept as a token bucket, its capacity replenished continuously up to the limit rather
//     than reset at fixed intervals;
//   - input tokens estimated at the start of a request (here the body's characters / 4,
//     rounded up) and corrected to its usage when done; output tokens counted as they are
//     produced, max_tokens not counted (here charged when the answer is done, its service time
//     over), so that a request is refused while the output bucket is empty. (Earlier versions
//     of the page, still in some translations, estimated the output from max_tokens at the
//     start and corrected it at the end; profiles.Anthropic charges 1 before the send, which a
//     user may raise to an expected answer, so that it paces under either reading.)
//   - a refusal is a 429 rate_limit_error with a retry-after header in seconds, and the
//     anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,reset}
//     fields on every answer: tokens remaining rounded to the nearest thousand, each reset the
//     instant the limit is fully replenished, in RFC 3339; the tokens-* fields are those of the
//     most restrictive token limit.
//
// Answers carry usage (Messages API reference, https://platform.claude.com/docs/en/api/messages):
// a JSON message, or with "stream": true the events message_start (usage.input_tokens),
// content_block_start, content_block_delta, content_block_stop, message_delta (usage.output_tokens,
// cumulative) and message_stop ("Streaming Messages",
// https://platform.claude.com/docs/en/build-with-claude/streaming).
type Anthropic struct {
	llmService
	limits   [3]int // rpm, itpm, otpm
	buckets3 map[string]*[3]minuteBucket
}

// NewAnthropic returns an Anthropic stand-in that allows each model rpm requests, itpm input
// tokens and otpm output tokens a minute.
func NewAnthropic(now func() time.Time, rpm, itpm, otpm int) *Anthropic {
	return &Anthropic{llmService: llmService{now: now}, limits: [3]int{rpm, itpm, otpm}, buckets3: map[string]*[3]minuteBucket{}}
}

func (a *Anthropic) buckets(model string, now time.Time) *[3]minuteBucket {
	if a.buckets3[model] == nil {
		a.buckets3[model] = &[3]minuteBucket{newMinuteBucket(a.limits[0], now), newMinuteBucket(a.limits[1], now), newMinuteBucket(a.limits[2], now)}
	}
	return a.buckets3[model]
}

func (a *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, chars, err := readLLM(r)
	if err != nil {
		a.admitted(r)
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"invalid JSON body"}}`, http.StatusBadRequest)
		return
	}
	estimate := (chars + 3) / 4
	a.mu.Lock()
	now := a.now()
	b := a.buckets(p.Model, now)
	var wait time.Duration
	which := ""
	switch {
	case !b[0].has(now, 1):
		which, wait = "requests", b[0].wait(now, 1)
	case !b[1].has(now, estimate):
		which, wait = "input tokens", b[1].wait(now, min(estimate, a.limits[1]))
	case !b[2].has(now, 1):
		which, wait = "output tokens", b[2].wait(now, 1)
	}
	if which != "" {
		a.fields(w, b, now)
		a.mu.Unlock()
		a.refuse()
		a.admitted(r)
		w.Header().Set("retry-after", strconv.FormatInt(seconds(wait), 10))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "rate_limit_error",
			"message": fmt.Sprintf("This request would exceed the rate limit for your organization of %s per minute for %s.", which, p.Model)}})
		return
	}
	b[0].take(now, 1)
	b[1].take(now, estimate)
	a.accept(now)
	if p.Stream {
		a.fields(w, b, now) // a stream's header goes before its tokens are known
	}
	a.mu.Unlock()
	a.admitted(r)

	in, out := p.inputTokens(), outputTokens(r, p.MaxTokens)
	a.serve(out)
	a.mu.Lock()
	done := a.now()
	b[1].take(done, in-estimate) // corrected to the usage
	b[2].take(done, out)         // produced
	a.done(now, in, out)
	if !p.Stream {
		a.fields(w, b, done)
	}
	a.mu.Unlock()
	if !p.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "msg_standin", "type": "message", "role": "assistant", "model": p.Model,
			"content":     []any{map[string]any{"type": "text", "text": words(out)}},
			"stop_reason": "end_turn", "usage": map[string]int{"input_tokens": in, "output_tokens": out}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_standin", "type": "message",
		"role": "assistant", "model": p.Model, "content": []any{}, "usage": map[string]int{"input_tokens": in, "output_tokens": 1}}})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, k := range chunks(out) {
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": words(k)}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]int{"output_tokens": out}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// fields sets the anthropic-ratelimit-* fields from the buckets at now.
func (a *Anthropic) fields(w http.ResponseWriter, b *[3]minuteBucket, now time.Time) {
	h := w.Header()
	set := func(name string, i int, round bool) {
		rem := b[i].remaining(now)
		if round {
			rem = (rem + 500) / 1000 * 1000
		}
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.Itoa(a.limits[i]))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.Itoa(rem))
		reset := now.Add(b[i].full(now)).UTC()
		if up := reset.Truncate(time.Second); !up.Equal(reset) {
			reset = up.Add(time.Second) // whole seconds, never early
		}
		h.Set("anthropic-ratelimit-"+name+"-reset", reset.Format(time.RFC3339))
	}
	set("requests", 0, false)
	set("input-tokens", 1, true)
	set("output-tokens", 2, true)
	tighter := 1 // the most restrictive token limit: the smaller share left
	if float64(b[2].remaining(now))/float64(a.limits[2]) < float64(b[1].remaining(now))/float64(a.limits[1]) {
		tighter = 2
	}
	set("tokens", tighter, true)
	date(w, now)
}
