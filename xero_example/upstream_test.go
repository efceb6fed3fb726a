package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
)

// TestUpstreamRefusesLikeXero: the stand-in really answers 429 like Xero, so a run with none means
// the pacing worked. Its clock is a manual one standing still, so that the 60 calls fall in one
// minute window (a second at scale 60) however long a loaded machine takes to send them.
func TestUpstreamRefusesLikeXero(t *testing.T) {
	up := newUpstream(60, false)
	up.now = clock.NewManual(time.Unix(1_800_000_000, 0)).Now
	srv := httptest.NewServer(up)
	defer srv.Close()
	get := func(tenant string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api.xro/2.0/Invoices", nil)
		if tenant != "" {
			req.Header.Set("Xero-Tenant-Id", tenant)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := range 60 {
		resp := get("a")
		if resp.StatusCode != 200 {
			t.Fatalf("call %d: %d", i+1, resp.StatusCode)
		}
		if got, want := resp.Header.Get("X-MinLimit-Remaining"), 59-i; got != strconv.Itoa(want) {
			t.Fatalf("call %d: X-MinLimit-Remaining %s, want %d", i+1, got, want)
		}
	}
	resp := get("a")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Rate-Limit-Problem") != "minute" ||
		resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-DayLimit-Remaining") != "4940" {
		t.Errorf("61st call: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get("b"); resp.StatusCode != 200 || resp.Header.Get("X-AppMinLimit-Remaining") != "9939" {
		t.Errorf("another tenant: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get(""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no tenant: %d", resp.StatusCode)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}
