package standin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// llmSend has h answer a request of the given body, answers of output tokens.
func llmSend(h http.Handler, body string, output int) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "http://llm.test/v1", strings.NewReader(body))
	req.Header.Set("X-Standin-Output-Tokens", strconv.Itoa(output))
	h.ServeHTTP(rec, req)
	return rec
}

func chat(maxTokens int, content string) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": maxTokens, "messages": []any{map[string]any{"role": "user", "content": content}}})
	return string(b)
}

// TestOpenAIAdmitsOnMaxTokensAndCorrectsToUsage: OpenAI's stand-in admits a request if its
// tokens bucket holds max(max_tokens, characters / 4), and corrects the charge to the usage
// when the answer is done: 600 admitted, 20 used (10 prompt, 10 completion) leave 980 of 1000;
// then a request of max_tokens 990 is a 429 about tokens, with the fields; a minute's refill
// later it goes.
func TestOpenAIAdmitsOnMaxTokensAndCorrectsToUsage(t *testing.T) {
	now := t0
	o := NewOpenAI(func() time.Time { return now }, 3, 1000)
	rec := llmSend(o, chat(600, strings.Repeat("abcd", 10)), 10)
	h := rec.Result().Header
	if rec.Code != 200 || h.Get("x-ratelimit-remaining-tokens") != "980" || h.Get("x-ratelimit-remaining-requests") != "2" ||
		h.Get("x-ratelimit-reset-tokens") != "1.2s" || h.Get("x-ratelimit-reset-requests") != "20s" || h.Get("x-ratelimit-limit-tokens") != "1000" {
		t.Fatalf("first: %d %v", rec.Code, h)
	}
	var doc struct {
		Usage map[string]int `json:"usage"`
	}
	json.Unmarshal(rec.Body.Bytes(), &doc)
	if doc.Usage["prompt_tokens"] != 10 || doc.Usage["completion_tokens"] != 10 || doc.Usage["total_tokens"] != 20 {
		t.Errorf("usage %v", doc.Usage)
	}
	rec = llmSend(o, chat(990, "hi"), 10)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"type":"tokens"`) || rec.Result().Header.Get("x-ratelimit-remaining-tokens") != "980" {
		t.Fatalf("max_tokens 990 with 980 left: %d %s %v", rec.Code, rec.Body, rec.Result().Header)
	}
	now = now.Add(600 * time.Millisecond) // 10 tokens refilled: 990
	if rec = llmSend(o, chat(990, "hi"), 10); rec.Code != 200 {
		t.Errorf("with 990 left: %d", rec.Code)
	}
	if n, _, _ := o.Accepted(); n != 2 || o.Refused() != 1 {
		t.Errorf("accepted %d, refused %d; want 2 and 1", n, o.Refused())
	}
}

// TestAnthropicCountsInputAtTheStartAndOutputWhenProduced: Anthropic's stand-in charges the
// input estimate when a request starts (corrected to the usage) and the output when produced,
// whatever max_tokens: 1000 input and 300 output tokens leave 9000 of 10 000 and 1700 of 2000
// ("2000": rounded to the nearest thousand), the output full again in 9 s. A request whose
// estimate is above what is left is a 429 with a retry-after in seconds. The tokens-* fields
// are the output's, the more restrictive (85 % left against 90 %).
func TestAnthropicCountsInputAtTheStartAndOutputWhenProduced(t *testing.T) {
	now := t0
	a := NewAnthropic(func() time.Time { return now }, 50, 10_000, 2000)
	rec := llmSend(a, chat(4096, strings.Repeat("abcd", 1000)), 300)
	h := rec.Result().Header
	if rec.Code != 200 || h.Get("anthropic-ratelimit-input-tokens-remaining") != "9000" || h.Get("anthropic-ratelimit-output-tokens-remaining") != "2000" ||
		h.Get("anthropic-ratelimit-requests-remaining") != "49" || h.Get("anthropic-ratelimit-output-tokens-reset") != now.Add(9*time.Second).UTC().Format(time.RFC3339) ||
		h.Get("anthropic-ratelimit-tokens-limit") != "2000" { // the output: 85 % left, the input 90 %
		t.Fatalf("first: %d %v", rec.Code, h)
	}
	if in, out := a.Tokens(); in != 1000 || out != 300 {
		t.Errorf("tokens %d and %d, want 1000 and 300", in, out)
	}
	body := chat(10, strings.Repeat("abcd", 10_000)) // an estimate above 10 000: waits for a full bucket
	rec = llmSend(a, body, 10)
	if rec.Code != http.StatusTooManyRequests || rec.Result().Header.Get("retry-after") != "6" || !strings.Contains(rec.Body.String(), "rate_limit_error") {
		t.Fatalf("estimate %d with 9000 left: %d, retry-after %q, %s", (len(body)+3)/4, rec.Code, rec.Result().Header.Get("retry-after"), rec.Body)
	}
}
