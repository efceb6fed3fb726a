package profiles

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/bodypeek"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// llmMaxBody bounds how much of an LLM request's body the profiles read (its model, its
// max_tokens, its characters): 32 MiB, above both vendors' request size limits.
const llmMaxBody = 32 << 20

// llmMaxModel bounds the model name put in a key: a longer one is cut.
const llmMaxModel = 128

// llmMaxPause is the longest pause the LLM profiles take: their limits are per minute, so a
// reset or Retry-After further away than an hour is garbled.
const llmMaxPause = time.Hour

// llmCharsPerToken is the default estimate's ratio: "one token generally corresponds to ~4
// characters of text for common English text" (OpenAI, "What are tokens and how to count them?",
// https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them).
const llmCharsPerToken = 4

// tokenSum adds two counts of tokens, neither negative; cost.Unknown when the sum overflows
// (an absurd usage), never a wrapped negative.
func tokenSum(a, b int) int {
	if a > math.MaxInt-b {
		return cost.Unknown
	}
	return a + b
}

// llmBody is what the LLM profiles read of a request body.
type llmBody struct {
	Model               string `json:"model"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	MaxOutputTokens     *int   `json:"max_output_tokens"` // OpenAI's Responses API
}

// requestBody returns a copy of req's body (req.GetBody, which http.NewRequest sets for a body
// in memory), at most llmMaxBody bytes; ok is false when there is none to copy.
func requestBody(req *http.Request) (b []byte, ok bool) {
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	defer body.Close()
	b, err = io.ReadAll(io.LimitReader(body, llmMaxBody))
	return b, err == nil
}

// parseLLM reads the fields of llmBody from req's body; the zero llmBody when it has none or is
// not a JSON object.
func parseLLM(req *http.Request) llmBody {
	var p llmBody
	if b, ok := requestBody(req); ok {
		_ = json.Unmarshal(b, &p)
	}
	return p
}

// estimateTokens is the LLM profiles' default estimate of a request's input tokens before it is
// sent: the characters (Unicode code points) of its body divided by 4, rounded up, at least 1;
// 1 for a request whose body cannot be copied (no req.GetBody). The body's JSON syntax and
// field names are counted too: an estimate a little high, never far low, for text in English.
func estimateTokens(req *http.Request) int {
	b, ok := requestBody(req)
	if !ok {
		return 1
	}
	return max(1, (utf8.RuneCount(b)+llmCharsPerToken-1)/llmCharsPerToken)
}

// llmKey keys a request by its credential (the header named, hashed as byCredential hashes
// Authorization) and its model, under prefix: both vendors keep each model's limits apart. A
// request whose model cannot be read is keyed by the credential alone.
func llmKey(prefix, header string) ratemonitor.KeyFunc {
	cred := ratemonitor.KeyByHeader(header, nil)
	return func(req *http.Request) string {
		k := prefix + ":" + cred(req)
		if m := parseLLM(req).Model; m != "" {
			if len(m) > llmMaxModel {
				m = m[:llmMaxModel]
			}
			k += ":" + m
		}
		return k
	}
}

// llmSync is the LLM profiles' WithSync: the figures come from the profile's cost reader, which
// sends each to its meter; the pauses from the refusals (a 429's retry-after).
func llmSync() *ratemonitor.SyncConfig {
	return &ratemonitor.SyncConfig{Readers: []headers.Reader{}, Fallback: time.Minute, MaxPause: llmMaxPause}
}

// llmMinute is an LLM limit of limit a minute with a 1 s margin; none when limit is 0 (learned
// from the answers then).
func llmMinute(limit int) []strategy.Rule {
	if limit == 0 {
		return nil
	}
	return []strategy.Rule{{Limit: limit, Window: time.Minute, Margin: time.Second}}
}

// sseData returns the data of each event of a stream of server-sent events (HTML Living
// Standard, "Server-sent events": "data:" lines, one event per blank line) found in b, in
// order; with partial set, b may begin in the middle of a line, which is skipped. Each event's
// data lines are joined with "\n".
func sseData(b []byte, partial bool) [][]byte {
	if partial {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil
		}
		b = b[i+1:]
	}
	var out [][]byte
	var cur []byte
	have := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), cost.MaxBody)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		switch {
		case len(line) == 0:
			if have {
				out = append(out, cur)
			}
			cur, have = nil, false
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if have {
				cur = append(cur, '\n')
			}
			cur = append(cur, v...)
			have = true
		}
	}
	if have {
		out = append(out, cur)
	}
	return out
}

// bodyEvents returns the data of the events of a streamed body: all of them when the body is
// whole, else those of its first cost.MaxBody bytes and then of its last 64 KiB.
func bodyEvents(b cost.Body) [][]byte {
	ev := sseData(b.Head, false)
	if !b.Whole {
		ev = append(ev, sseData(b.Tail, true)...)
	}
	return ev
}

// isStream reports whether resp's body is a stream of server-sent events.
func isStream(resp *http.Response) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Type"))), "text/event-stream")
}

// llmReadCost reads the head with head and, for a JSON body (never a stream, which would be
// waited out), the body at once with body, its figures winning: the LLM readers' ReadCost.
func llmReadCost(resp *http.Response, now time.Time, head func(*http.Response, time.Time) cost.Report,
	body func(*http.Response, cost.Body, time.Time) cost.Report) cost.Report {
	rep := head(resp, now)
	if !cost.Wants(resp) || isStream(resp) {
		return rep
	}
	b, whole := bodypeek.Peek(resp, cost.MaxBody)
	if !whole {
		return rep
	}
	if !resp.Uncompressed && strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		// a gzip'd answer the caller asked for itself: its usage is in the inflated bytes
		if b, whole = gunzip(b, cost.MaxBody); !whole {
			return rep
		}
	}
	br := body(resp, cost.Body{Head: b, Whole: true}, now)
	if len(br.Meters) > 0 && rep.Meters == nil {
		rep.Meters = map[string]cost.Report{}
	}
	for name, m := range br.Meters {
		h := rep.Meters[name]
		h.Cost = m.Cost
		rep.Meters[name] = h
	}
	return rep
}

// gunzip inflates b, at most limit bytes; whole is false when b is not gzip or inflates to more.
func gunzip(b []byte, limit int) (out []byte, whole bool) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	out, err = io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	return out, err == nil && len(out) <= limit
}
