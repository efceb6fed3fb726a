package profiles_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// Pacing a Xero client takes three lines; here against a local Xero-like upstream, on a
// virtual clock so that the minute passes at once: 61 calls for one tenant, the 61st a minute
// (and the 1 s margin) after the first, none refused.
func ExampleXero() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	// The upstream, as Xero for one tenant: 60 calls in any minute, a 429 past that, and the
	// remaining counts in every answer.
	var mu sync.Mutex
	var accepted []time.Time
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		now, recent := clk.Now(), 0
		for _, t := range accepted {
			if now.Sub(t) < time.Minute {
				recent++
			}
		}
		if recent >= 60 {
			refused++
			w.Header().Set("Retry-After", "60")
			w.Header().Set("X-Rate-Limit-Problem", "minute")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		accepted = append(accepted, now)
		w.Header().Set("X-MinLimit-Remaining", strconv.Itoa(60-recent-1))
		w.Header().Set("X-DayLimit-Remaining", strconv.Itoa(5000-len(accepted)))
		w.Header().Set("X-AppMinLimit-Remaining", strconv.Itoa(10_000-recent-1))
	}))
	defer srv.Close()

	// A real program passes http.DefaultTransport and leaves out WithClock.
	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.Xero("xero-app:example").Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}

	start := clk.Now()
	for range 61 {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/api.xro/2.0/Invoices", nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		req.Header.Set("Xero-Tenant-Id", "tenant-1")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("%d accepted, %d refused, the last after %v\n", len(accepted), refused, accepted[len(accepted)-1].Sub(start))
	// Output: 61 accepted, 0 refused, the last after 1m1s
}

// A profile is a value: change a figure (here a GITHUB_TOKEN's 1000 an hour) before New.
func ExampleProfile() {
	p := profiles.GitHubREST()
	p.Rules[0].Limit = 1000
	tr, err := ratemonitor.New(http.DefaultTransport, p.Options()...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	points, _ := p.Meter("points")
	fmt.Println(tr.Rules(), points.Name, points.Rules, p.InFlight)
	// Output: [1000/1h0m0s (margin 1s)] points [900/1m0s (margin 1s)] 100
}
