package ratemonitor

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLearnStaleAnswerOfOldPolicy: requests A and B go out before anything is known. B's
// answer states the policy q=100 per 60 s, 99 left; A's answer, read after it, states the
// older policy q=10, used up (r=0, t=60). The meter stays B's (100 per 60 s), and A's figures,
// about a quota the upstream no longer states, must not pause it nor count it full: a third
// request goes out at once. (The first-answer gate, which would hold B until A's answer, is
// off: with FirstAnswer above 1, or over a store several processes share, two answers can
// still come back in this order.)
func TestLearnStaleAnswerOfOldPolicy(t *testing.T) {
	releaseA := make(chan struct{})
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		switch r.Header.Get("X-Req") {
		case "A":
			<-releaseA
			h.Set("RateLimit-Policy", `a;q=10;w=60`)
			h.Set("RateLimit", `a;r=0;t=60`)
		default:
			h.Set("RateLimit-Policy", `a;q=100;w=60`)
			h.Set("RateLimit", `a;r=99;t=60`)
		}
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
	tr, err := New(base, WithPacing(), WithSync(SyncConfig{FirstAnswer: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func(ctx context.Context, name string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example/", nil)
		req.Header.Set("X-Req", name)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	aDone := make(chan error, 1)
	go func() { aDone <- send(context.Background(), "A") }()
	// A is counted unmetered before B goes (it waits in base): wait until it is.
	for {
		tr.sync.learn.mu.Lock()
		lk := tr.sync.learn.keys["api.example"]
		n := 0
		if lk != nil {
			n = lk.unmetered
		}
		tr.sync.learn.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := send(context.Background(), "B"); err != nil {
		t.Fatal(err)
	}
	close(releaseA)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := send(ctx, "C"); err != nil {
		t.Fatalf("a request after the stale answer: %v", err)
	}
}
