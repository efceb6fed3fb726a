package profiles_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestLLMBodySentWhole: the body the upstream gets is the caller's, byte for byte, after the
// profile's key and estimate read it: a large JSON body, one that is not JSON, and one without
// GetBody.
func TestLLMBodySentWhole(t *testing.T) {
	var mu sync.Mutex
	var got [][32]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, sha256.Sum256(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, openAIJSON)
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(1000, 100_000_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("é", 3<<20) + `"}]}`
	for _, c := range []struct {
		name string
		body []byte
		wrap bool
	}{{"big", []byte(big), false}, {"not JSON", []byte("\x00\xff not json {"), false}, {"no GetBody", []byte(big), true}} {
		var rd io.Reader = bytes.NewReader(c.body)
		if c.wrap {
			rd = io.MultiReader(rd)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, rd)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		mu.Lock()
		if last := got[len(got)-1]; last != sha256.Sum256(c.body) {
			t.Errorf("%s: the upstream got another body", c.name)
		}
		mu.Unlock()
	}
}

// TestLLMKeyBadFields: a max_tokens the profile cannot read (a string, a float) leaves the
// model in the key; the admission charge ignores it.
func TestLLMKeyBadFields(t *testing.T) {
	p := profiles.OpenAI(60, 1000, nil)
	for _, body := range []string{`{"model":"m","max_tokens":"100"}`, `{"max_tokens":1.5,"model":"m"}`, `{"model":"m","max_tokens":-5}`, `{"model":"m","max_tokens":1e30}`} {
		req, _ := http.NewRequest(http.MethodPost, "http://x/", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		if k := p.Key(req); !strings.HasSuffix(k, ":m") {
			t.Errorf("%s: key %q, want the model m in it", body, k)
		}
		m, _ := p.Meter("tokens")
		if n := m.Cost(req); n != (len(body)+3)/4 {
			t.Errorf("%s: cost %d, want the estimate %d", body, n, (len(body)+3)/4)
		}
	}
}

// TestLLMGarbledStreams: events the readers cannot read are skipped, never panic, and the last
// readable usage wins; CRLF line ends and data lines without a space are read.
func TestLLMGarbledStreams(t *testing.T) {
	br := bodyReader(t, profiles.OpenAI(60, 150_000, nil))
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"CRLF", "data: {\"usage\":{\"total_tokens\":7}}\r\n\r\n", 7},
		{"no space", "data:{\"usage\":{\"total_tokens\":8}}\n\n", 8},
		{"garbage then usage", "data: {{{\n\ndata: \x00\xff\n\n: comment\n\nretry: 5\n\ndata: {\"usage\":{\"total_tokens\":9}}\n\ndata: [DONE]\n\n", 9},
		{"usage then garbage", "data: {\"usage\":{\"total_tokens\":9}}\n\ndata: {\"usage\":{\"total_tokens\":\"x\"}}\n\n", 9},
		{"negative", "data: {\"usage\":{\"total_tokens\":-9}}\n\n", cost.Unknown},
		{"overflow", "data: {\"usage\":{\"prompt_tokens\":9223372036854775807,\"completion_tokens\":9223372036854775807}}\n\n", cost.Unknown},
		{"no end", "data: {\"usage\":{\"total_tokens\":11}}", 11},
		{"empty", "", cost.Unknown},
		{"Responses API", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":36,\"output_tokens\":87,\"total_tokens\":123}}}\n\n", 123},
		{"multi-line data", "data: {\"usage\":\ndata: {\"total_tokens\":5}}\n\n", 5},
	} {
		resp := response(200, c.body, "Content-Type", "text/event-stream")
		rep := br.ReadBody(resp, cost.Body{Head: []byte(c.body), Whole: true}, t0)
		got := cost.Unknown
		if m, ok := rep.Meters["tokens"]; ok {
			got = m.Cost
		}
		if got != c.want {
			t.Errorf("%s: tokens %d, want %d", c.name, got, c.want)
		}
	}
	// Anthropic: input_tokens + cache_creation_input_tokens overflowing is unknown, not negative
	ab := bodyReader(t, profiles.Anthropic(50, 30_000, 8_000, nil))
	const over = `{"usage":{"input_tokens":9223372036854775807,"cache_creation_input_tokens":9223372036854775807,"output_tokens":3}}`
	if rep := ab.ReadBody(response(200, over, "Content-Type", "application/json"), cost.Body{Head: []byte(over), Whole: true}, t0); rep.Meters["input"].Cost != cost.Unknown || rep.Meters["output"].Cost != 3 {
		t.Errorf("Anthropic overflow: %+v, want input Unknown and output 3", rep.Meters)
	}
}

// TestLLMConcurrentStreams: 40 goroutines on one key, streams read a byte at a time, closed
// halfway, their context cancelled, or never closed; -race and goleak (TestMain) judge.
func TestLLMConcurrentStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("anthropic-ratelimit-input-tokens-remaining", "1000000")
		for _, line := range strings.SplitAfter(anthropicStream, "\n\n") {
			io.WriteString(w, line)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.Anthropic(100_000, 100_000_000, 100_000_000, nil).Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(fmt.Sprintf(`{"model":"m","n":%d}`, i)))
			req.Header.Set("X-Api-Key", "k")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			switch i % 4 {
			case 0:
				io.Copy(io.Discard, iotest.OneByteReader(resp.Body))
			case 1:
				io.ReadFull(resp.Body, make([]byte, 100))
			case 2:
				io.ReadFull(resp.Body, make([]byte, 100))
				cancel()
				io.Copy(io.Discard, resp.Body)
			case 3:
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
}

// TestLLMReservationCorrected: a request that spends a Reservation's slot (1 on every meter)
// is corrected to its usage on the meters as one charged at its send is.
func TestLLMReservationCorrected(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, openAIJSON)
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(500, 30_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
	req.Header.Set("Authorization", "Bearer k")
	key := tr.Key(req)
	res, err := tr.Reserve(context.Background(), key, 2)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req.WithContext(res.Context(context.Background())))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if res.Remaining() != 1 {
		t.Fatalf("the request did not spend a slot: %d left", res.Remaining())
	}
	// 2 slots of 1 token, the one spent corrected to the usage's 21: 22
	u, err := tr.Meter("tokens").AllocationUsed(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if u[0].Used != 22 {
		t.Errorf("tokens: %d, want 22 (a slot of 1 unspent, one corrected to 21)", u[0].Used)
	}
}

// TestLLMGzip: a gzip answer the caller asked for (Accept-Encoding set, so not decompressed by
// net/http) is corrected from its usage, streamed through the Transport or read by ReadCost.
func TestLLMGzip(t *testing.T) {
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		io.WriteString(w, s)
		w.Close()
		return b.Bytes()
	}
	br := bodyReader(t, profiles.OpenAI(500, 30_000, nil))
	resp := response(200, string(gz(openAIJSON)), "Content-Type", "application/json", "Content-Encoding", "gzip")
	if rep := br.ReadCost(resp, t0); rep.Meters["tokens"].Cost != 21 {
		t.Errorf("ReadCost of a gzip JSON answer: %+v, want tokens 21", rep)
	}
	if b, _ := io.ReadAll(resp.Body); !bytes.Equal(b, gz(openAIJSON)) {
		t.Errorf("the body after ReadCost is not the gzip answer")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(gz(openAIStream))
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(500, 30_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Accept-Encoding", "gzip")
	r2, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, iotest.OneByteReader(r2.Body))
	r2.Body.Close()
	if u, _ := tr.Meter("tokens").AllocationUsed(context.Background(), tr.Key(req)); u[0].Used != 21 {
		t.Errorf("gzip stream: tokens %d, want 21", u[0].Used)
	}
}

// TestLLMLongStream: a stream over cost.MaxBody is corrected from its first MiB and its last
// 64 KiB (docs/llm.md): Anthropic's message_start at the head, its last message_delta and
// OpenAI's usage chunk at the tail; read a byte at a time, then in whole.
func TestLLMLongStream(t *testing.T) {
	fill := strings.Repeat("data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello hello hello\"}}\n\n", (cost.MaxBody*2)/100)
	anth := strings.SplitAfterN(anthropicStream, "\n\n", 2)
	for _, c := range []struct {
		name, header, stream string
		profile              profiles.Profile
		want                 map[string]int
	}{
		{"OpenAI", "Authorization", fill + openAIStream, profiles.OpenAI(500, 30_000, nil), map[string]int{"tokens": 21}},
		{"Anthropic", "X-Api-Key", anth[0] + fill + anth[1], profiles.Anthropic(50, 30_000, 8_000, nil), map[string]int{"input": 25, "output": 15}},
	} {
		for _, oneByte := range []bool{false, true} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, c.stream)
			}))
			tr, err := ratemonitor.New(srv.Client().Transport, append(c.profile.Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
			req.Header.Set(c.header, "k")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			var rd io.Reader = resp.Body
			if oneByte {
				rd = iotest.OneByteReader(rd)
			}
			if n, _ := io.Copy(io.Discard, rd); n != int64(len(c.stream)) {
				t.Errorf("%s: read %d bytes, want %d", c.name, n, len(c.stream))
			}
			resp.Body.Close()
			for meter, want := range c.want {
				if u, _ := tr.Meter(meter).AllocationUsed(context.Background(), tr.Key(req)); u[0].Used != want {
					t.Errorf("%s one byte %v: meter %q holds %d, want %d", c.name, oneByte, meter, u[0].Used, want)
				}
			}
			tr.Close()
			srv.Close()
		}
	}
}

// TestLLMNeverEndingStream: a stream that never ends, its context cancelled, ends the caller's
// read with the context's error, keeps the admission charge, and leaves no goroutine (TestMain).
func TestLLMNeverEndingStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"usage\":null}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(500, 30_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
	req.Header.Set("Authorization", "k")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 10))
	cancel()
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Error("a cancelled stream read to no error")
	}
	resp.Body.Close()
	if u, _ := tr.Meter("tokens").AllocationUsed(context.Background(), tr.Key(req)); u[0].Used != 300 {
		t.Errorf("tokens %d, want the admission's 300", u[0].Used)
	}
	// max_tokens above the tier's tokens a minute: refused before the send, with a clear error
	big, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":40000}`))
	big.Header.Set("Authorization", "k")
	if resp, err := tr.RoundTrip(big); err == nil {
		resp.Body.Close()
		t.Error("max_tokens 40000 over a tpm of 30000 was sent")
	} else {
		t.Log(err)
	}
}

// TestLLMStackedAndWithCost: two Transports stacked, each with the profile (the outer also
// with WithCost on its request rule), each correct the tokens to the usage.
func TestLLMStackedAndWithCost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); string(b) != `{"model":"m","max_tokens":300}` {
			t.Errorf("the upstream got %q", b)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, openAIStream)
	}))
	defer srv.Close()
	inner, err := ratemonitor.New(srv.Client().Transport, append(profiles.OpenAI(500, 30_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	outer, err := ratemonitor.New(inner, append(profiles.OpenAI(500, 30_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)), ratemonitor.WithCost(func(*http.Request) int { return 5 }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
	req.Header.Set("Authorization", "k")
	resp, err := outer.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for name, tr := range map[string]*ratemonitor.Transport{"inner": inner, "outer": outer} {
		if u, _ := tr.Meter("tokens").AllocationUsed(context.Background(), tr.Key(req)); u[0].Used != 21 {
			t.Errorf("%s: tokens %d, want 21", name, u[0].Used)
		}
	}
	if u, _ := outer.AllocationUsed(context.Background(), outer.Key(req)); u[0].Used != 5 {
		t.Errorf("outer requests: %d, want WithCost's 5", u[0].Used)
	}
}

// TestLLMBodyNotCopied: docs/llm.md: "A body it cannot copy costs an estimate of 1 token and
// is keyed without its model".
func TestLLMBodyNotCopied(t *testing.T) {
	body := `{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hello hello hello"}]}`
	for _, c := range []struct {
		p      profiles.Profile
		header string
		meter  string
	}{{profiles.OpenAI(60, 1000, nil), "Authorization", "tokens"}, {profiles.Anthropic(60, 1000, 1000, nil), "X-Api-Key", "input"}} {
		req, _ := http.NewRequest(http.MethodPost, "http://x/", io.MultiReader(strings.NewReader(body)))
		req.Header.Set(c.header, "k")
		if k := c.p.Key(req); strings.HasSuffix(k, ":m") {
			t.Errorf("%s: key %q has the model", c.p.Name, k)
		}
		m, _ := c.p.Meter(c.meter)
		if n := m.Cost(req); n != 1 {
			t.Errorf("%s: cost %d, want 1", c.p.Name, n)
		}
		if b, _ := io.ReadAll(req.Body); string(b) != body {
			t.Errorf("%s: the body was read: %q left", c.p.Name, b)
		}
	}
}

// TestLLMReadAfterClose: a stream read to its end after its Transport was closed neither
// panics nor blocks: the correction finds the Transport closed.
func TestLLMReadAfterClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, anthropicStream)
	}))
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.Anthropic(50, 30_000, 8_000, nil).Options(), ratemonitor.WithClock(clock.NewManual(t0)))...)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"model":"m","max_tokens":300}`))
	req.Header.Set("X-Api-Key", "k")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if b, _ := io.ReadAll(resp.Body); string(b) != anthropicStream {
		t.Errorf("the stream after Close: %q", b)
	}
	resp.Body.Close()
}

// TestAnthropicDeltaInputGrows: a message_delta's usage is cumulative, its input_tokens and
// cache_creation_input_tokens included (Anthropic's MessageDeltaUsage; with server tools they
// grow past message_start's): the last one's input wins.
func TestAnthropicDeltaInputGrows(t *testing.T) {
	br := bodyReader(t, profiles.Anthropic(50, 30_000, 8_000, nil))
	stream := strings.Replace(anthropicStream, `"usage":{"output_tokens":15}`,
		`"usage":{"input_tokens":40,"cache_creation_input_tokens":7,"cache_read_input_tokens":100,"output_tokens":15}`, 1)
	rep := br.ReadBody(response(200, stream, "Content-Type", "text/event-stream"), cost.Body{Head: []byte(stream), Whole: true}, t0)
	if rep.Meters["input"].Cost != 47 || rep.Meters["output"].Cost != 15 {
		t.Errorf("ReadBody = %+v, want input 47 (40 + 7 created, the 100 read not counted) and output 15", rep.Meters)
	}
}
