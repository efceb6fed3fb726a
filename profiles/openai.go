package profiles

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// OpenAI's header fields, "Rate limits", https://platform.openai.com/docs/guides/rate-limits
// ("Rate limits in headers"): the limit, the remaining and the time until the limit "resets to
// its initial state" (a duration such as 1s, 6m0s or 12ms), of requests and of tokens.
const (
	openAILimitRequests     = "X-Ratelimit-Limit-Requests"
	openAIRemainingRequests = "X-Ratelimit-Remaining-Requests"
	openAIResetRequests     = "X-Ratelimit-Reset-Requests"
	openAILimitTokens       = "X-Ratelimit-Limit-Tokens"
	openAIRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	openAIResetTokens       = "X-Ratelimit-Reset-Tokens"
)

// OpenAI paces an OpenAI API client on the user's tier for one model: rpm requests a minute
// and tpm tokens a minute, input and output together (meter "tokens"), each with a 1 s margin;
// with both 0, learned per key from the x-ratelimit-* fields (meters "requests" and "tokens").
// A request is keyed by its API key (Authorization, hashed) and its body's model. As OpenAI's
// guide counts it, a request costs on "tokens", when admitted, the larger of its max_tokens
// (or max_completion_tokens, max_output_tokens) and estimate(req) (nil: the body's characters
// / 4, rounded up); the answer's usage (JSON, or a stream's last chunk) corrects it once the
// body is read to its end, and a stream closed before keeps the admission charge. The
// x-ratelimit-* fields raise the usage; a 429 pauses the key. New fails when a figure is below
// 1 and they are not both 0. Source: https://platform.openai.com/docs/guides/rate-limits.
// See docs/llm.md.
func OpenAI(rpm, tpm int, estimate func(*http.Request) int) Profile {
	const name = "profiles.OpenAI"
	learn := rpm == 0 && tpm == 0
	if !learn && (rpm < 1 || tpm < 1) {
		return failed(name, "%s: rpm %d and tpm %d must be at least 1: give your tier's figures for the model, or both 0 to learn them", name, rpm, tpm)
	}
	if estimate == nil {
		estimate = estimateTokens
	}
	return Profile{
		Name:       name,
		Key:        llmKey("openai", "Authorization"),
		Rules:      llmMinute(rpm),
		Meters:     []ratemonitor.Meter{{Name: "tokens", Rules: llmMinute(tpm), Cost: openAIAdmission(estimate)}},
		CostReport: openAIReader{},
		Sync:       llmSync(),
		Pacing:     true,
	}
}

// openAIAdmission is what a request costs on OpenAI's tokens when it is admitted: "Your rate
// limit is calculated as the maximum of max_tokens and the estimated number of tokens based on
// the character count of your request" (the guide above, "Error mitigation"); at least 1.
func openAIAdmission(estimate func(*http.Request) int) func(*http.Request) int {
	return func(req *http.Request) int {
		p := parseLLM(req)
		n := estimate(req)
		for _, m := range []*int{p.MaxTokens, p.MaxCompletionTokens, p.MaxOutputTokens} {
			if m != nil {
				n = max(n, *m)
			}
		}
		return max(1, n)
	}
}

// openAIUsage is the usage object of a Chat Completions answer (prompt_tokens,
// completion_tokens, total_tokens) or of a Responses API one (input_tokens, output_tokens,
// total_tokens). Source: OpenAI API reference, "The chat completion object" and "The response
// object", https://platform.openai.com/docs/api-reference.
type openAIUsage struct {
	PromptTokens     *int `json:"prompt_tokens"`
	CompletionTokens *int `json:"completion_tokens"`
	InputTokens      *int `json:"input_tokens"`
	OutputTokens     *int `json:"output_tokens"`
	TotalTokens      *int `json:"total_tokens"`
}

// total returns the tokens the usage says the request used, or cost.Unknown.
func (u *openAIUsage) total() int {
	switch {
	case u == nil:
		return cost.Unknown
	case u.TotalTokens != nil && *u.TotalTokens >= 0:
		return *u.TotalTokens
	case u.PromptTokens != nil && u.CompletionTokens != nil && *u.PromptTokens >= 0 && *u.CompletionTokens >= 0:
		return tokenSum(*u.PromptTokens, *u.CompletionTokens)
	case u.InputTokens != nil && u.OutputTokens != nil && *u.InputTokens >= 0 && *u.OutputTokens >= 0:
		return tokenSum(*u.InputTokens, *u.OutputTokens)
	}
	return cost.Unknown
}

// openAIDoc is a JSON answer, or a streamed chunk: usage at the top (Chat Completions; a
// stream's last chunk when stream_options.include_usage is set, null in the others) or in
// response (the Responses API's response.completed event).
type openAIDoc struct {
	Usage    *openAIUsage `json:"usage"`
	Response *struct {
		Usage *openAIUsage `json:"usage"`
	} `json:"response"`
}

func (d openAIDoc) total() int {
	if n := d.Usage.total(); n != cost.Unknown {
		return n
	}
	if d.Response != nil {
		return d.Response.Usage.total()
	}
	return cost.Unknown
}

// openAIReader is the OpenAI profile's cost.BodyReader: the x-ratelimit-* fields for the
// requests rule and the tokens meter, and the usage of the body for the tokens meter.
type openAIReader struct{}

// ReadHead reads the x-ratelimit-* fields.
func (openAIReader) ReadHead(resp *http.Response, _ time.Time) cost.Report {
	rep := cost.Report{Cost: cost.Unknown}
	if sig, ok := openAISignal(resp.Header, openAILimitRequests, openAIRemainingRequests, openAIResetRequests); ok {
		rep.Signals = []headers.Signal{sig}
	}
	if sig, ok := openAISignal(resp.Header, openAILimitTokens, openAIRemainingTokens, openAIResetTokens); ok {
		rep.Meters = map[string]cost.Report{"tokens": {Cost: cost.Unknown, Signals: []headers.Signal{sig}}}
	}
	return rep
}

// ReadBody reads the usage of a JSON answer, or of the last event of a stream that has one.
func (openAIReader) ReadBody(resp *http.Response, b cost.Body, _ time.Time) cost.Report {
	n := cost.Unknown
	if isStream(resp) {
		for _, ev := range bodyEvents(b) {
			var d openAIDoc
			if json.Unmarshal(ev, &d) == nil {
				if t := d.total(); t != cost.Unknown {
					n = t
				}
			}
		}
	} else if b.Whole {
		var d openAIDoc
		if json.Unmarshal(b.Head, &d) == nil {
			n = d.total()
		}
	}
	if n == cost.Unknown {
		return cost.Report{Cost: cost.Unknown}
	}
	return cost.Report{Cost: cost.Unknown, Meters: map[string]cost.Report{"tokens": {Cost: n}}}
}

// ReadCost reads the header and a JSON body at once (not a stream).
func (r openAIReader) ReadCost(resp *http.Response, now time.Time) cost.Report {
	return llmReadCost(resp, now, r.ReadHead, r.ReadBody)
}

func (openAIReader) String() string { return "profiles.OpenAI" }

// openAISignal reads one limit's three fields as a signal on a minute rule; ok is false without
// a readable remaining.
func openAISignal(h http.Header, limit, remaining, reset string) (headers.Signal, bool) {
	r := headerparse.Count(h, remaining)
	if r == headers.Unknown {
		return headers.Signal{}, false
	}
	return headers.Signal{Window: time.Minute, Remaining: r, Limit: headerparse.Count(h, limit), Reset: openAIReset(h.Get(reset))}, true
}

// openAIReset reads a reset written as a Go duration ("1s", "6m0s", "12ms", "7.66s"):
// headers.Unknown when absent, unreadable or negative.
func openAIReset(v string) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return headers.Unknown
	}
	return d
}
