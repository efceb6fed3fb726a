package profiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestXeroConcurrentNeverRefused: ten goroutines share one tenant whose calls each take 2 ms at the
// stand-in, which refuses a sixth call in progress (X-Rate-Limit-Problem: concurrent). The
// profile's in-flight limit holds them to 5 in progress: no refusal of either kind, and the
// stand-in never sees more than 5 at once. Real time (50 calls, under the minute limit, so nothing
// waits for a rate slot; a virtual clock that jumps would expire the leases).
func TestXeroConcurrentNeverRefused(t *testing.T) {
	s := standin.NewXero(time.Now)
	s.Hold = 2 * time.Millisecond
	srv := httptest.NewServer(s)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.Xero("xero-app:test").Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	const goroutines, each = 10, 5
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for range goroutines {
		wg.Go(func() {
			for range each {
				resp, err := c.Do(request(srv.URL, "Xero-Tenant-Id", "tenant-1"))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n, _, _ := s.Accepted()
	if n != goroutines*each || s.Refused() != 0 {
		t.Errorf("accepted %d, refused %d: want all %d accepted", n, s.Refused(), goroutines*each)
	}
	if m := s.MaxInFlight(); m > profiles.XeroInFlight {
		t.Errorf("the stand-in saw %d calls of the tenant in progress at once, want at most %d", m, profiles.XeroInFlight)
	}
	if got := tr.InFlight("tenant-1"); got != 0 {
		t.Errorf("InFlight after every body was closed = %d, want 0", got)
	}
}

// TestXeroHoldsFiveInFlightAtXero: ten goroutines on one tenant: at most profiles.XeroInFlight
// calls are in progress at Xero at once.
func TestXeroHoldsFiveInFlightAtXero(t *testing.T) {
	up := newBarrier(10, func(_ int, w http.ResponseWriter) { w.Write([]byte(`{}`)) })
	srv := httptest.NewServer(up)
	defer srv.Close()
	tr, err := ratemonitor.New(srv.Client().Transport, profiles.Xero("xero-app:test").Options()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	fire(t, tr, 10, func() *http.Request { return request(srv.URL, "Xero-Tenant-Id", "tenant-1") })
	if up.maxIn > profiles.XeroInFlight {
		t.Errorf("%d calls of one tenant were in progress at Xero at once, want at most %d", up.maxIn, profiles.XeroInFlight)
	}
}

// TestXeroConcurrent429PausesASecond: Xero's concurrent-limit 429 (no Retry-After) pauses the
// tenant a few seconds at most, not a minute.
func TestXeroConcurrent429PausesASecond(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.Xero("xero-app:test").Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rate-Limit-Problem", "concurrent")
		w.Header().Set("X-MinLimit-Remaining", "50")
		w.Header().Set("X-DayLimit-Remaining", "4900")
		w.Header().Set("X-AppMinLimit-Remaining", "9000")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	req := request(srv.URL, "Xero-Tenant-Id", "tenant-1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w, err := tr.WaitTime(context.Background(), tr.Key(req), 1)
	if err != nil || w > 5*time.Second {
		t.Errorf("after Xero's concurrent-limit 429 the tenant waits %v (%v), want a few seconds at most", w, err)
	}
}

// TestXeroEmptyAppKeyNamesProfile: Xero("") makes New fail with an error naming Xero("").
func TestXeroEmptyAppKeyNamesProfile(t *testing.T) {
	tr, err := ratemonitor.New(nil, profiles.Xero("").Options()...)
	if err == nil {
		tr.Close()
		t.Fatal("New accepted Xero(\"\")")
	}
	if !strings.Contains(err.Error(), "Xero(") {
		t.Errorf("New: %v, want an error naming Xero(\"\")", err)
	}
}
