package profiles_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// An OpenAI client paced at a tier's 500 requests and 200 000 tokens a minute: a request of
// max_tokens 1000 is charged 1000 tokens before the send, and the answer's usage (21 tokens)
// corrects the charge once the body has been read. Here against a local upstream.
func ExampleOpenAI() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"chat.completion","usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`)
	}))
	defer srv.Close()

	// A real program passes http.DefaultTransport.
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.OpenAI(500, 200_000, nil).Options()...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}

	body := `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"Hello!"}]}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-example")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body) // read to its end: the usage corrects the charge
	resp.Body.Close()

	tokens, err := tr.Meter("tokens").AllocationUsed(context.Background(), tr.Key(req))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tokens counted:", tokens[0].Used, "of", tokens[0].Used+tokens[0].Remaining)
	// Output: tokens counted: 21 of 200000
}
