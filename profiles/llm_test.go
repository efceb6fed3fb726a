package profiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// response is a response to a POST with the given header fields (name, value pairs) and body.
func response(status int, body string, fields ...string) *http.Response {
	resp := &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)),
		Request: httptest.NewRequest(http.MethodPost, "http://llm.test/", nil)}
	for i := 0; i+1 < len(fields); i += 2 {
		resp.Header.Set(fields[i], fields[i+1])
	}
	return resp
}

func bodyReader(t *testing.T, p profiles.Profile) cost.BodyReader {
	t.Helper()
	br, ok := p.CostReport.(cost.BodyReader)
	if !ok {
		t.Fatalf("%s: CostReport %T is not a cost.BodyReader", p.Name, p.CostReport)
	}
	return br
}

// OpenAI's examples: the guide's header fields ("Rate limits in headers": 60 requests, 59
// left, reset 1s; 150 000 tokens, 149 984 left, reset 6m0s), and the API reference's usage
// (prompt_tokens 9, completion_tokens 12, total_tokens 21), in a JSON answer and in a stream's
// last chunk (stream_options.include_usage).
const (
	openAIJSON   = `{"id":"chatcmpl-123","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how may I assist you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`
	openAIStream = "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n" +
		"data: [DONE]\n\n"
)

// Anthropic's examples: the Messages reference's usage (input_tokens 2095, output_tokens 503),
// and the streaming page's events (message_start with input_tokens 25 and output_tokens 1,
// message_delta with output_tokens 15).
const (
	anthropicJSON   = `{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","usage":{"input_tokens":2095,"output_tokens":503}}`
	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-test\",\"stop_reason\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"!\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func TestOpenAIReaderReadsTheGuidesFields(t *testing.T) {
	br := bodyReader(t, profiles.OpenAI(60, 150_000, nil))
	resp := response(200, openAIJSON, "x-ratelimit-limit-requests", "60", "x-ratelimit-limit-tokens", "150000",
		"x-ratelimit-remaining-requests", "59", "x-ratelimit-remaining-tokens", "149984",
		"x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s")
	got := br.ReadHead(resp, t0)
	want := cost.Report{Cost: cost.Unknown,
		Signals: []headers.Signal{{Window: time.Minute, Remaining: 59, Limit: 60, Reset: time.Second}},
		Meters: map[string]cost.Report{"tokens": {Cost: cost.Unknown,
			Signals: []headers.Signal{{Window: time.Minute, Remaining: 149_984, Limit: 150_000, Reset: 6 * time.Minute}}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadHead = %+v, want %+v", got, want)
	}
	// ReadCost: the header's figures and a JSON body's usage at once
	if rep := br.ReadCost(response(200, openAIJSON, "Content-Type", "application/json", "x-ratelimit-remaining-tokens", "149984"), t0); rep.Meters["tokens"].Cost != 21 || rep.Meters["tokens"].Signals[0].Remaining != 149_984 {
		t.Errorf("ReadCost = %+v, want the tokens' cost 21 and remaining 149984", rep)
	}
	// a reset under a second: 12ms
	if got := br.ReadHead(response(200, "", "x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "12ms"), t0); got.Signals[0].Reset != 12*time.Millisecond || got.Signals[0].Limit != headers.Unknown {
		t.Errorf("reset 12ms: %+v", got.Signals)
	}
	for _, c := range []struct {
		name, contentType, body string
		whole                   bool
		want                    int
	}{
		{"JSON", "application/json", openAIJSON, true, 21},
		{"stream", "text/event-stream", openAIStream, true, 21},
		{"stream without usage", "text/event-stream", strings.Replace(openAIStream, `"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}`, `"choices":[],"usage":null`, 1), true, cost.Unknown},
		{"Responses API", "application/json", `{"object":"response","usage":{"input_tokens":36,"output_tokens":87,"total_tokens":123}}`, true, 123},
	} {
		resp := response(200, c.body, "Content-Type", c.contentType)
		rep := br.ReadBody(resp, cost.Body{Head: []byte(c.body), Whole: c.whole}, t0)
		got := cost.Unknown
		if m, ok := rep.Meters["tokens"]; ok {
			got = m.Cost
		}
		if got != c.want || rep.Cost != cost.Unknown {
			t.Errorf("%s: ReadBody = %+v: tokens %d, want %d (and the request's own cost Unknown)", c.name, rep, got, c.want)
		}
	}
}

// TestAnthropicReaderReadsThePagesFields: the requests' fields as they are; the token fields'
// remaining, rounded to the nearest thousand by Anthropic, taken as the most they can be (+499);
// the RFC 3339 resets measured from now; the usage of a JSON answer and of a stream.
func TestAnthropicReaderReadsThePagesFields(t *testing.T) {
	br := bodyReader(t, profiles.Anthropic(50, 30_000, 8_000, nil))
	resp := response(200, anthropicJSON,
		"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
		"anthropic-ratelimit-requests-reset", "2026-12-04T12:00:01Z",
		"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "27000",
		"anthropic-ratelimit-input-tokens-reset", "2026-12-04T12:00:06Z",
		"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "7000",
		"anthropic-ratelimit-output-tokens-reset", "2026-12-04T12:00:07.5Z",
		"anthropic-ratelimit-tokens-limit", "8000", "anthropic-ratelimit-tokens-remaining", "7000",
		"anthropic-ratelimit-tokens-reset", "2026-12-04T12:00:07Z")
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	got := br.ReadHead(resp, now)
	want := cost.Report{Cost: cost.Unknown,
		Signals: []headers.Signal{{Window: time.Minute, Remaining: 49, Limit: 50, Reset: time.Second}},
		Meters: map[string]cost.Report{
			"input":  {Cost: cost.Unknown, Signals: []headers.Signal{{Window: time.Minute, Remaining: 27_499, Limit: 30_000, Reset: 6 * time.Second}}},
			"output": {Cost: cost.Unknown, Signals: []headers.Signal{{Window: time.Minute, Remaining: 7_499, Limit: 8_000, Reset: 7500 * time.Millisecond}}},
		}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadHead = %+v, want %+v", got, want)
	}
	// a reset already passed: the usage is freed (0); an unreadable one: Unknown
	past := br.ReadHead(response(429, "", "anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2026-12-04T11:59:59Z",
		"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", "soon"), now)
	if past.Signals[0].Reset != 0 || past.Meters["input"].Signals[0].Reset != headers.Unknown {
		t.Errorf("past and unreadable resets: %+v", past)
	}
	for _, c := range []struct {
		name, contentType, body string
		in, out                 int
	}{
		{"JSON", "application/json", anthropicJSON, 2095, 503},
		{"stream", "text/event-stream", anthropicStream, 25, 15},
		{"cache writes count as input", "application/json", `{"type":"message","usage":{"input_tokens":50,"cache_creation_input_tokens":2000,"cache_read_input_tokens":9000,"output_tokens":7}}`, 2050, 7},
	} {
		resp := response(200, c.body, "Content-Type", c.contentType)
		rep := br.ReadBody(resp, cost.Body{Head: []byte(c.body), Whole: true}, now)
		if in, out := rep.Meters["input"].Cost, rep.Meters["output"].Cost; in != c.in || out != c.out || rep.Cost != cost.Unknown {
			t.Errorf("%s: ReadBody = %+v: input %d, output %d; want %d and %d", c.name, rep, in, out, c.in, c.out)
		}
	}
	// a body longer than cost.MaxBody: message_start in its head, message_delta in its tail
	head, tail := anthropicStream[:strings.Index(anthropicStream, "event: content_block_stop")], anthropicStream[strings.Index(anthropicStream, "event: message_delta")-10:]
	rep := br.ReadBody(response(200, "", "Content-Type", "text/event-stream"), cost.Body{Head: []byte(head), Tail: []byte(tail)}, now)
	if in, out := rep.Meters["input"].Cost, rep.Meters["output"].Cost; in != 25 || out != 15 {
		t.Errorf("head and tail: input %d, output %d; want 25 and 15", in, out)
	}
}

// TestLLMEstimates: the charges before the send. OpenAI's is the larger of max_tokens (or
// max_completion_tokens) and the characters / 4; Anthropic's input is the characters / 4, its
// output 1 whatever max_tokens says; a replaced estimate is used as given.
func TestLLMEstimates(t *testing.T) {
	body := func(s string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, "http://llm.test/", strings.NewReader(s))
		return req
	}
	prompt := strings.Repeat("word ", 200)                                                    // 1000 characters
	small := `{"model":"m","max_tokens":2048,"messages":[{"role":"user","content":"Hello"}]}` // 80 characters
	large := `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	completion := `{"model":"m","max_completion_tokens":4000,"messages":[]}`
	cost := func(p profiles.Profile, meter string, req *http.Request) int {
		m, ok := p.Meter(meter)
		if !ok {
			t.Fatalf("%s has no meter %q", p.Name, meter)
		}
		return m.Cost(req)
	}
	oa := profiles.OpenAI(500, 30_000, nil)
	if got := cost(oa, "tokens", body(small)); got != 2048 {
		t.Errorf("OpenAI, max_tokens 2048, 80 characters: %d, want 2048", got)
	}
	if got, want := cost(oa, "tokens", body(large)), (len(large)+3)/4; got != want || want != 268 {
		t.Errorf("OpenAI, max_tokens 16, %d characters: %d, want %d", len(large), got, want)
	}
	if got := cost(oa, "tokens", body(completion)); got != 4000 {
		t.Errorf("OpenAI, max_completion_tokens 4000: %d, want 4000", got)
	}
	if got := cost(oa, "tokens", body("é"+strings.Repeat("a", 6))); got != 2 { // 7 characters, 8 bytes
		t.Errorf("OpenAI, 7 characters: %d, want 2", got)
	}
	an := profiles.Anthropic(50, 30_000, 8_000, nil)
	if in, out := cost(an, "input", body(small)), cost(an, "output", body(small)); in != 20 || out != 1 {
		t.Errorf("Anthropic, max_tokens 2048, 80 characters: input %d, output %d; want 20 and 1", in, out)
	}
	own := profiles.Anthropic(50, 30_000, 8_000, func(*http.Request) int { return 777 })
	if in := cost(own, "input", body(small)); in != 777 {
		t.Errorf("Anthropic with an estimate of its own: input %d, want 777", in)
	}
	// keys: the credential hashed, and the model
	tr, err := ratemonitor.New(http.DefaultTransport, profiles.Anthropic(50, 30_000, 8_000, nil).Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req := body(small)
	req.Header.Set("X-Api-Key", "sk-ant-secret")
	if k := tr.Key(req); k != "anthropic:"+ratemonitor.HashedKey(nil, "sk-ant-secret")+":m" {
		t.Errorf("key %q", k)
	}
	for _, p := range []profiles.Profile{profiles.OpenAI(0, 1, nil), profiles.Anthropic(1, 1, 0, nil)} {
		if _, err := ratemonitor.New(http.DefaultTransport, p.Options()...); err == nil || !strings.Contains(err.Error(), "at least 1") {
			t.Errorf("%s with a figure of 0: New returned %v", p.Name, err)
		}
	}
}

// TestLLMChargesCorrected: what one request leaves on each meter once its answer has been read,
// on a manual clock (the answers carry no rate-limit fields, so only the costs move the
// counts): the usage of a JSON answer, or of a stream read to its end; a stream closed halfway
// keeps the charges made before the send (OpenAI: max(max_tokens, characters / 4); Anthropic:
// characters / 4 input tokens and 1 output token).
func TestLLMChargesCorrected(t *testing.T) {
	const reqBody = `{"model":"m","max_tokens":300,"stream":true,"messages":[{"role":"user","content":"` + "Hello, Claude. Hello, GPT. Hello." + `"}]}`
	chars := len(reqBody)
	for _, c := range []struct {
		name        string
		profile     profiles.Profile
		header      string
		contentType string
		answer      string
		half        bool
		want        map[string]int
	}{
		{"OpenAI/JSON", profiles.OpenAI(500, 30_000, nil), "Authorization", "application/json", openAIJSON, false, map[string]int{"tokens": 21}},
		{"OpenAI/stream", profiles.OpenAI(500, 30_000, nil), "Authorization", "text/event-stream", openAIStream, false, map[string]int{"tokens": 21}},
		{"OpenAI/stream closed halfway", profiles.OpenAI(500, 30_000, nil), "Authorization", "text/event-stream", openAIStream, true, map[string]int{"tokens": 300}},
		{"Anthropic/JSON", profiles.Anthropic(50, 30_000, 8_000, nil), "X-Api-Key", "application/json", anthropicJSON, false, map[string]int{"input": 2095, "output": 503}},
		{"Anthropic/stream", profiles.Anthropic(50, 30_000, 8_000, nil), "X-Api-Key", "text/event-stream", anthropicStream, false, map[string]int{"input": 25, "output": 15}},
		{"Anthropic/stream closed halfway", profiles.Anthropic(50, 30_000, 8_000, nil), "X-Api-Key", "text/event-stream", anthropicStream, true, map[string]int{"input": (chars + 3) / 4, "output": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", c.contentType)
				io.WriteString(w, c.answer)
			}))
			defer srv.Close()
			tr, err := ratemonitor.New(srv.Client().Transport, append(c.profile.Options(), ratemonitor.WithClock(clk))...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(reqBody))
			req.Header.Set(c.header, "secret")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if c.half {
				io.ReadFull(resp.Body, make([]byte, len(c.answer)/2))
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			key := tr.Key(req)
			for meter, want := range c.want {
				u, err := tr.Meter(meter).AllocationUsed(context.Background(), key)
				if err != nil {
					t.Fatal(err)
				}
				if u[0].Used != want {
					t.Errorf("meter %q holds %d, want %d", meter, u[0].Used, want)
				}
			}
			if u, _ := tr.AllocationUsed(context.Background(), key); u[0].Used != 1 {
				t.Errorf("requests: %d, want 1", u[0].Used)
			}
		})
	}
}

// TestLLMRefusalsPause: a 429 pauses the key, all its meters with it: Anthropic's for its
// retry-after (7 s), OpenAI's, which sends none, for the profile's fallback of a minute; and a
// limit the answer says is used up (OpenAI's tokens: 0 left, reset in 6 s) pauses its meter
// until its reset.
func TestLLMRefusalsPause(t *testing.T) {
	for _, c := range []struct {
		name       string
		profile    profiles.Profile
		header     string
		fields     []string
		want       time.Duration
		meter      string
		meterPause time.Duration
	}{
		{"Anthropic", profiles.Anthropic(50, 30_000, 8_000, nil), "X-Api-Key", []string{"retry-after", "7",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2027-01-15T08:00:07Z"}, 7 * time.Second, "", 0},
		{"OpenAI", profiles.OpenAI(500, 30_000, nil), "Authorization", []string{"x-ratelimit-remaining-requests", "499",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6s"}, time.Minute, "tokens", 6 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
			clk := clock.NewManual(now)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(c.fields); i += 2 {
					w.Header().Set(c.fields[i], c.fields[i+1])
				}
				w.Header().Set("Date", now.Format(http.TimeFormat))
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			defer srv.Close()
			tr, err := ratemonitor.New(srv.Client().Transport, append(c.profile.Options(), ratemonitor.WithClock(clk))...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":10,"messages":[]}`))
			req.Header.Set(c.header, "secret")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			st, err := tr.Status(context.Background(), tr.Key(req))
			if err != nil {
				t.Fatal(err)
			}
			if !st.PausedUntil.Equal(now.Add(c.want)) {
				t.Errorf("the key paused until %v, want %v", st.PausedUntil, now.Add(c.want))
			}
			found := c.meter == ""
			for _, m := range st.Meters {
				if m.Meter == c.meter {
					found = true
					if !m.PausedUntil.Equal(now.Add(c.meterPause)) {
						t.Errorf("meter %q paused until %v, want %v", m.Meter, m.PausedUntil, now.Add(c.meterPause))
					}
				}
			}
			if !found {
				t.Errorf("no meter %q in the status", c.meter)
			}
		})
	}
}
