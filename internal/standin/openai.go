package standin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// OpenAI stands in for OpenAI's Chat Completions endpoint, as OpenAI's "Rate limits" guide
// describes its limits (https://platform.openai.com/docs/guides/rate-limits):
//
//   - requests per minute (RPM) and tokens per minute (TPM), input and output together, per
//     organization and project, for each model apart: here per model, for one API key;
//   - a request counts on TPM, at admission, "the maximum of max_tokens and the estimated
//     number of tokens based on the character count of your request" ("Error mitigation": the
//     estimate here is the body's characters / 4, rounded up); when its answer is done the
//     charge is corrected to its usage (total_tokens), the tokens it used;
//   - the x-ratelimit-limit-, -remaining- and -reset- fields of requests and of tokens on each
//     response ("Rate limits in headers"), a reset being the time until the limit "resets to its
//     initial state", written as a duration (1s, 6m0s, 12ms);
//   - a refusal is a 429 whose error says which limit ("Rate limit reached for requests", or
//     tokens), with those fields. The guide documents no Retry-After; none is sent.
//
// The guide does not say how a minute is counted: here each limit is a token minuteBucket of a
// minute's worth, refilled continuously, so that the reset is the time to full. Answers
// carry usage: a JSON chat.completion, or with "stream": true a stream of chat.completion.chunk
// events whose last chunk has the usage when stream_options.include_usage is set (API
// reference, "Create chat completion", https://platform.openai.com/docs/api-reference/chat),
// ended by "data: [DONE]".
type OpenAI struct {
	llmService
	requests map[string]*minuteBucket
	tokens   map[string]*minuteBucket
	rpm, tpm int
}

// NewOpenAI returns an OpenAI stand-in that allows each model rpm requests and tpm tokens a
// minute.
func NewOpenAI(now func() time.Time, rpm, tpm int) *OpenAI {
	return &OpenAI{llmService: llmService{now: now}, requests: map[string]*minuteBucket{}, tokens: map[string]*minuteBucket{}, rpm: rpm, tpm: tpm}
}

func (o *OpenAI) buckets(model string, now time.Time) (*minuteBucket, *minuteBucket) {
	if o.requests[model] == nil {
		r, t := newMinuteBucket(o.rpm, now), newMinuteBucket(o.tpm, now)
		o.requests[model], o.tokens[model] = &r, &t
	}
	return o.requests[model], o.tokens[model]
}

func (o *OpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, chars, err := readLLM(r)
	if err != nil {
		o.admitted(r)
		http.Error(w, `{"error":{"message":"invalid JSON body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	admission := (chars + 3) / 4
	for _, m := range []*int{p.MaxTokens, p.MaxCompletionTokens} {
		if m != nil {
			admission = max(admission, *m)
		}
	}
	o.mu.Lock()
	now := o.now()
	reqs, toks := o.buckets(p.Model, now)
	which := ""
	switch {
	case !reqs.has(now, 1):
		which = "requests"
	case !toks.has(now, admission):
		which = "tokens"
	}
	if which != "" {
		o.fields(w, reqs, toks, now)
		o.mu.Unlock()
		o.refuse()
		o.admitted(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Rate limit reached for %s in organization org-standin on %s: Limit %d", p.Model, which, map[string]int{"requests": o.rpm, "tokens": o.tpm}[which]),
			"type":    which, "param": nil, "code": "rate_limit_exceeded"}})
		return
	}
	reqs.take(now, 1)
	toks.take(now, admission)
	o.accept(now)
	if p.Stream {
		o.fields(w, reqs, toks, now) // a stream's header goes before its tokens are known
	}
	o.mu.Unlock()
	o.admitted(r)

	in, out := p.inputTokens(), outputTokens(r, firstSet(p.MaxCompletionTokens, p.MaxTokens))
	o.serve(out)
	o.mu.Lock()
	done := o.now()
	toks.take(done, in+out-admission) // corrected to the usage
	o.done(now, in, out)
	if !p.Stream {
		o.fields(w, reqs, toks, done)
	}
	o.mu.Unlock()
	usage := map[string]int{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	if !p.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-standin", "object": "chat.completion", "model": p.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": words(out)}, "finish_reason": "stop"}},
			"usage":   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	includeUsage := p.StreamOptions != nil && p.StreamOptions.IncludeUsage
	chunk := func(choices []any, u any) map[string]any {
		return map[string]any{"id": "chatcmpl-standin", "object": "chat.completion.chunk", "model": p.Model, "choices": choices, "usage": u}
	}
	for _, k := range chunks(out) {
		sse(w, "", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"content": words(k)}, "finish_reason": nil}}, nil))
	}
	sse(w, "", chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}, nil))
	if includeUsage {
		sse(w, "", chunk([]any{}, usage))
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// fields sets the x-ratelimit-* fields from the buckets at now.
func (o *OpenAI) fields(w http.ResponseWriter, reqs, toks *minuteBucket, now time.Time) {
	h := w.Header()
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(o.rpm))
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(o.tpm))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(reqs.remaining(now)))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(toks.remaining(now)))
	h.Set("x-ratelimit-reset-requests", reqs.full(now).Round(time.Millisecond).String())
	h.Set("x-ratelimit-reset-tokens", toks.full(now).Round(time.Millisecond).String())
	date(w, now)
}

func firstSet(v ...*int) *int {
	for _, p := range v {
		if p != nil {
			return p
		}
	}
	return nil
}
