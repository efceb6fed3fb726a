package standin

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// minuteBucket is a token bucket of limit tokens replenished continuously at limit a minute, full at
// first. Its level may go below 0: a charge corrected upward after the fact is a debt.
type minuteBucket struct {
	limit float64
	level float64
	at    time.Time
}

func newMinuteBucket(limit int, now time.Time) minuteBucket {
	return minuteBucket{limit: float64(limit), level: float64(limit), at: now}
}

func (b *minuteBucket) fill(now time.Time) {
	if e := now.Sub(b.at); e > 0 {
		b.level = math.Min(b.limit, b.level+b.limit*e.Minutes())
		b.at = now
	}
}

// has reports whether n tokens are in the bucket at now.
func (b *minuteBucket) has(now time.Time, n int) bool { b.fill(now); return b.level >= float64(n) }

func (b *minuteBucket) take(now time.Time, n int) { b.fill(now); b.level -= float64(n) }

// wait is how long until n tokens are in the bucket (n at most its limit).
func (b *minuteBucket) wait(now time.Time, n int) time.Duration {
	b.fill(now)
	short := float64(n) - b.level
	if short <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(short / b.limit * float64(time.Minute)))
}

// remaining is the whole tokens in the minuteBucket, at least 0.
func (b *minuteBucket) remaining(now time.Time) int {
	b.fill(now)
	return max(0, int(math.Floor(b.level)))
}

// full is how long until the minuteBucket is full again.
func (b *minuteBucket) full(now time.Time) time.Duration { return b.wait(now, int(b.limit)) }

// llmRequest is what the LLM stand-ins read of a request body.
type llmRequest struct {
	Model               string `json:"model"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	Stream              bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	System   string `json:"system"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
}

// readLLM reads a request's body: its fields, and its characters (Unicode code points).
func readLLM(r *http.Request) (llmRequest, int, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return llmRequest{}, 0, err
	}
	var p llmRequest
	err = json.Unmarshal(b, &p)
	return p, utf8.RuneCount(b), err
}

// inputTokens is the stand-ins' tokenizer: a token for each 4 characters of the prompt (the
// system prompt and the messages' contents), rounded up, as the vendors' rule of thumb has it.
func (p llmRequest) inputTokens() int {
	n := utf8.RuneCountInString(p.System)
	for _, m := range p.Messages {
		n += utf8.RuneCountInString(m.Content)
	}
	return (n + 3) / 4
}

// outputTokens is what the answer to r produces: X-Standin-Output-Tokens (16 without), at most
// its maximum.
func outputTokens(r *http.Request, most *int) int {
	n, err := strconv.Atoi(r.Header.Get("X-Standin-Output-Tokens"))
	if err != nil || n < 0 {
		n = 16
	}
	if most != nil {
		n = min(n, *most)
	}
	return n
}

// chunks splits n output tokens into pieces of at most 10, the deltas of a stream.
func chunks(n int) []int {
	var c []int
	for n > 0 {
		k := min(n, 10)
		c = append(c, k)
		n -= k
	}
	return c
}

// words is text of n tokens at 4 characters each.
func words(n int) string { return strings.Repeat("tok ", n) }

// llmService is what the LLM stand-ins share: the clock, the time an answer takes, and what was
// used.
type llmService struct {
	Counts
	now func() time.Time
	// Sleep, when set, waits out an answer's service time on the test's clock (a manual clock:
	// the time moves while answers are produced); nil: answers take no time.
	Sleep func(time.Duration)
	// Service is the time an answer takes (nil: 1 s and 10 ms a token produced).
	Service func(output int) time.Duration
	// Admitted, when set, is called with each request once it is admitted or refused, before
	// its service time.
	Admitted func(*http.Request)

	mu     sync.Mutex
	input  int // the input tokens of the answers produced
	output int // their output tokens
	log    []llmUse
}

// llmUse is one answer: when its request was admitted, and the tokens it used.
type llmUse struct {
	at            time.Time
	input, output int
}

func (s *llmService) admitted(r *http.Request) {
	if s.Admitted != nil {
		s.Admitted(r)
	}
}

func (s *llmService) serve(output int) {
	if s.Sleep == nil {
		return
	}
	d := time.Second + time.Duration(output)*10*time.Millisecond
	if s.Service != nil {
		d = s.Service(output)
	}
	s.Sleep(d)
}

// Tokens returns the input and output tokens of the answers produced.
func (s *llmService) Tokens() (input, output int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.input, s.output
}

// Used returns the answers to requests admitted before until, and their input and output
// tokens.
func (s *llmService) Used(until time.Time) (answers, input, output int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.log {
		if u.at.Before(until) {
			answers, input, output = answers+1, input+u.input, output+u.output
		}
	}
	return answers, input, output
}

// done records an answer to a request admitted at at; s.mu is held.
func (s *llmService) done(at time.Time, input, output int) {
	s.input += input
	s.output += output
	s.log = append(s.log, llmUse{at, input, output})
}

// sse writes one server-sent event: an event line when event is set, and v as its data.
func sse(w io.Writer, event string, v any) {
	if event != "" {
		io.WriteString(w, "event: "+event+"\n")
	}
	b, _ := json.Marshal(v)
	io.WriteString(w, "data: "+string(b)+"\n\n")
}
