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

// Anthropic's header fields, "Rate limits", https://platform.claude.com/docs/en/api/rate-limits
// ("Response headers"): per limit, its maximum, what remains ("rounded to the nearest
// thousand" for tokens) and when it is "fully replenished", in RFC 3339. The
// anthropic-ratelimit-tokens-* fields are those of whichever token limit is the most
// restrictive now: the input and output fields say the same apart, and are the ones read.
const (
	anthropicRequests = "Anthropic-Ratelimit-Requests-"
	anthropicInput    = "Anthropic-Ratelimit-Input-Tokens-"
	anthropicOutput   = "Anthropic-Ratelimit-Output-Tokens-"
)

// anthropicRounding is the most Anthropic's remaining tokens may lie below the true figure:
// they are "rounded to the nearest thousand" (the rate-limits page's "Response headers").
const anthropicRounding = 499

// Anthropic paces a Claude API (Messages) client on the user's tier for one model: rpm
// requests, itpm input tokens (meter "input") and otpm output tokens (meter "output") a
// minute, each with a 1 s margin; with all 0, learned per key from the anthropic-ratelimit-*
// fields (meters "requests", "input" and "output"). A request is keyed by its API key
// (X-Api-Key, hashed) and its model. As Anthropic's page counts them, a request costs
// estimate(req) input tokens at its start (nil: the body's characters / 4, rounded up) and 1
// output token (max_tokens is not charged); the answer's usage (JSON, or a stream's
// message_start and last message_delta) corrects both once the body is read to its end, and a
// stream closed before keeps those charges. The fields raise the usage; a 429 pauses the key
// for its retry-after. New fails when a figure is below 1 and they are not all 0.
// Source: https://platform.claude.com/docs/en/api/rate-limits. See docs/llm.md.
func Anthropic(rpm, itpm, otpm int, estimate func(*http.Request) int) Profile {
	const name = "profiles.Anthropic"
	learn := rpm == 0 && itpm == 0 && otpm == 0
	if !learn && (rpm < 1 || itpm < 1 || otpm < 1) {
		return failed(name, "%s: rpm %d, itpm %d and otpm %d must be at least 1: give your tier's figures for the model, or all 0 to learn them", name, rpm, itpm, otpm)
	}
	if estimate == nil {
		estimate = estimateTokens
	}
	return Profile{
		Name:  name,
		Key:   llmKey("anthropic", "X-Api-Key"),
		Rules: llmMinute(rpm),
		Meters: []ratemonitor.Meter{
			{Name: "input", Rules: llmMinute(itpm), Cost: func(req *http.Request) int { return max(1, estimate(req)) }},
			{Name: "output", Rules: llmMinute(otpm), Cost: func(*http.Request) int { return 1 }},
		},
		CostReport: anthropicReader{},
		Sync:       llmSync(),
		Pacing:     true,
	}
}

// anthropicUsage is the usage of a Messages answer: "input_tokens and
// cache_creation_input_tokens" count toward the input limit, and, for most models,
// cache_read_input_tokens do not (the rate-limits page above); output_tokens toward the output
// limit. Source: Claude API reference, "Messages", https://platform.claude.com/docs/en/api/messages,
// and "Streaming Messages", https://platform.claude.com/docs/en/build-with-claude/streaming
// (message_start carries the usage so far; each message_delta's usage is cumulative).
type anthropicUsage struct {
	InputTokens         *int `json:"input_tokens"`
	CacheCreationTokens *int `json:"cache_creation_input_tokens"`
	OutputTokens        *int `json:"output_tokens"`
}

// input returns the tokens counted toward the input limit, or cost.Unknown.
func (u *anthropicUsage) input() int {
	if u == nil || u.InputTokens == nil || *u.InputTokens < 0 {
		return cost.Unknown
	}
	n := *u.InputTokens
	if u.CacheCreationTokens != nil && *u.CacheCreationTokens > 0 {
		n = tokenSum(n, *u.CacheCreationTokens)
	}
	return n
}

// output returns the output tokens, or cost.Unknown.
func (u *anthropicUsage) output() int {
	if u == nil || u.OutputTokens == nil || *u.OutputTokens < 0 {
		return cost.Unknown
	}
	return *u.OutputTokens
}

// anthropicDoc is a JSON answer (usage at the top), or a streamed event: message_start (usage
// in message) or message_delta (usage at the top).
type anthropicDoc struct {
	Type    string          `json:"type"`
	Usage   *anthropicUsage `json:"usage"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
}

// anthropicReader is the Anthropic profile's cost.BodyReader: the anthropic-ratelimit-* fields
// for the requests rule and the input and output meters, and the usage of the body for the
// meters.
type anthropicReader struct{}

// ReadHead reads the anthropic-ratelimit-* fields.
func (anthropicReader) ReadHead(resp *http.Response, now time.Time) cost.Report {
	rep := cost.Report{Cost: cost.Unknown}
	if sig, ok := anthropicSignal(resp.Header, anthropicRequests, now); ok {
		rep.Signals = []headers.Signal{sig}
	}
	for meter, prefix := range map[string]string{"input": anthropicInput, "output": anthropicOutput} {
		if sig, ok := anthropicSignal(resp.Header, prefix, now); ok {
			// "rounded to the nearest thousand": the most it can be, so that the rounding
			// alone never raises our count nor pauses the meter (a reported 0 is 0 to 499)
			sig.Remaining += anthropicRounding
			if rep.Meters == nil {
				rep.Meters = map[string]cost.Report{}
			}
			rep.Meters[meter] = cost.Report{Cost: cost.Unknown, Signals: []headers.Signal{sig}}
		}
	}
	return rep
}

// ReadBody reads the usage of a JSON answer, or of a stream's message_start and its last
// message_delta.
func (anthropicReader) ReadBody(resp *http.Response, b cost.Body, _ time.Time) cost.Report {
	in, out := cost.Unknown, cost.Unknown
	if isStream(resp) {
		for _, ev := range bodyEvents(b) {
			var d anthropicDoc
			if json.Unmarshal(ev, &d) != nil {
				continue
			}
			u := d.Usage
			if d.Type == "message_start" && d.Message != nil {
				u = d.Message.Usage
			}
			if n := u.input(); n != cost.Unknown {
				in = n
			}
			if n := u.output(); n != cost.Unknown {
				out = n
			}
		}
	} else if b.Whole {
		var d anthropicDoc
		if json.Unmarshal(b.Head, &d) == nil {
			in, out = d.Usage.input(), d.Usage.output()
		}
	}
	rep := cost.Report{Cost: cost.Unknown}
	if in != cost.Unknown || out != cost.Unknown {
		rep.Meters = map[string]cost.Report{"input": {Cost: in}, "output": {Cost: out}}
	}
	return rep
}

// ReadCost reads the header and a JSON body at once (not a stream).
func (r anthropicReader) ReadCost(resp *http.Response, now time.Time) cost.Report {
	return llmReadCost(resp, now, r.ReadHead, r.ReadBody)
}

func (anthropicReader) String() string { return "profiles.Anthropic" }

// anthropicSignal reads one limit's -limit, -remaining and -reset fields (prefix ends with "-")
// as a signal on a minute rule, the reset an RFC 3339 instant measured from now; ok is false
// without a readable remaining.
func anthropicSignal(h http.Header, prefix string, now time.Time) (headers.Signal, bool) {
	r := headerparse.Count(h, prefix+"Remaining")
	if r == headers.Unknown {
		return headers.Signal{}, false
	}
	sig := headers.Signal{Window: time.Minute, Remaining: r, Limit: headerparse.Count(h, prefix+"Limit"), Reset: headers.Unknown}
	if at, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get(prefix+"Reset"))); err == nil {
		sig.Reset = max(0, at.Sub(now))
	}
	return sig, true
}
