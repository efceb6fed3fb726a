package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// openAIClient is docs/llm.md's OpenAI client.
func openAIClient() (*ratemonitor.Transport, *http.Client, error) {
	// your tier's requests and tokens a minute for the model
	p := profiles.OpenAI(500, 200_000, nil) // nil: estimate the input as characters / 4
	tr, err := ratemonitor.New(http.DefaultTransport, p.Options()...)
	if err != nil {
		return nil, nil, err
	}
	// Close the Transport at shutdown (tr.Close): it stops its timers.
	return tr, &http.Client{Transport: tr}, nil
}

// openAILearned is docs/llm.md's OpenAI client that learns the tier's figures.
func openAILearned() (*ratemonitor.Transport, error) {
	// 0, 0: the requests and tokens a minute come from each key's first answer
	return ratemonitor.New(http.DefaultTransport, profiles.OpenAI(0, 0, nil).Options()...)
}

// anthropicClient is docs/llm.md's Anthropic client, with an expected answer charged before
// the send.
func anthropicClient() (*http.Client, error) {
	// your tier's requests, input tokens and output tokens a minute for the model
	p := profiles.Anthropic(50, 30_000, 8_000, nil)
	out, _ := p.Meter("output")                       // a copy
	out.Cost = func(*http.Request) int { return 400 } // the answers you expect, in tokens
	p.SetMeter(out)
	tr, err := ratemonitor.New(http.DefaultTransport, p.Options()...)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: tr}, nil
}

// streamChat is docs/llm.md's streamed request.
func streamChat(ctx context.Context, client *http.Client, apiKey string, prompt string) error {
	body, err := json.Marshal(map[string]any{
		"model":          "gpt-4o-mini",
		"max_tokens":     1024,
		"messages":       []any{map[string]any{"role": "user", "content": prompt}},
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true}, // the last chunk carries the usage
	})
	if err != nil {
		return err
	}
	// a body in memory: the profile reads a copy of it (the model, max_tokens, the characters)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		"https://api.openai.com/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body) // read to its end: the usage corrects the charge
	return err
}
