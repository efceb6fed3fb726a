package ratemonitor_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	rm "github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestFullMeterHoldsUpNoOtherKeyAtAnotherMeter: meters [app (one key, 100 a minute),
// content (per key, 1 a minute, GETs not charged)]. Key k1 spends its content; its second POST
// waits for content (a minute) holding its turn at the app meter. A GET on k2 (its key, the app
// and the points all have room; content does not apply) then waits behind it at the app meter,
// and with a 10 s deadline (the content meter frees in a minute) was never sent.
func TestFullMeterHoldsUpNoOtherKeyAtAnotherMeter(t *testing.T) {
	base := rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil })
	tr, err := rm.New(base, rm.WithPacing(), rm.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}),
		rm.WithKeyFunc(rm.KeyByHeader("K", nil)),
		rm.WithAppRules("app", strategy.Rule{Limit: 100, Window: time.Minute}),
		rm.WithMeter(rm.Meter{Name: "content", Rules: []strategy.Rule{{Limit: 1, Window: time.Minute}}, Cost: func(r *http.Request) int {
			if r.Method == http.MethodGet {
				return 0
			}
			return 1
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func(ctx context.Context, method, k string) error {
		req, _ := http.NewRequestWithContext(ctx, method, "http://x/", nil)
		req.Header.Set("K", k)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := send(context.Background(), http.MethodPost, "k1"); err != nil {
		t.Fatal(err)
	}
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- send(bg, http.MethodPost, "k1") }() // waits a minute for content
	time.Sleep(200 * time.Millisecond)
	ctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer c2()
	start := time.Now()
	if err := send(ctx, http.MethodGet, "k2"); err != nil {
		t.Errorf("GET on k2 (every limit that applies has room): %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	cancel()
	<-done
}

// TestFullMeterHoldsUpNoRequestOfItsKeyItDoesNotCharge: one key, meter content (1 a minute,
// GETs not charged). A second POST waits a minute for content holding the key's turn: a GET on
// the same key (the key has room; content does not apply to it) waits behind it. GitHub's
// profiles have this shape (content: 80 a minute, 500 an hour per token, reads 0).
func TestFullMeterHoldsUpNoRequestOfItsKeyItDoesNotCharge(t *testing.T) {
	base := rtFunc(func(r *http.Request) (*http.Response, error) { return okResp(r), nil })
	tr, err := rm.New(base, rm.WithPacing(), rm.WithRules(strategy.Rule{Limit: 100, Window: time.Minute}),
		rm.WithKeyFunc(func(*http.Request) string { return "token" }),
		rm.WithMeter(rm.Meter{Name: "content", Rules: []strategy.Rule{{Limit: 1, Window: time.Minute}}, Cost: func(r *http.Request) int {
			if r.Method == http.MethodGet {
				return 0
			}
			return 1
		}}))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	send := func(ctx context.Context, method string) error {
		req, _ := http.NewRequestWithContext(ctx, method, "http://x/", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := send(context.Background(), http.MethodPost); err != nil {
		t.Fatal(err)
	}
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- send(bg, http.MethodPost) }()
	time.Sleep(200 * time.Millisecond)
	ctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer c2()
	if err := send(ctx, http.MethodGet); err != nil {
		t.Errorf("GET on the same key (content does not apply): %v", err)
	}
	cancel()
	<-done
}
