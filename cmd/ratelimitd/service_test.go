package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/headers"
)

// TestServiceAdmitsLimitThenRefusesWithProblem drives the service over real HTTP with each store:
// five calls of alice are admitted, the sixth gets a 429 with Retry-After and problem details, bob
// is not affected, /status counts without counting, and api_calls holds exactly the admitted calls.
func TestServiceAdmitsLimitThenRefusesWithProblem(t *testing.T) {
	for _, c := range []struct {
		store, strategy string
		usedAfter       int // alice's count after six attempts
	}{
		{"memory", "fixedwindow", 6}, // the refused attempt is counted too
		{"sqlite", "fixedwindow", 6},
		{"sqlite", "tokenbucket", 5},
		{"redis", "rollingwindow", 5},
		{"redis", "fixedwindow", 6},
		{"redis", "tokenbucket", 5},
		{"dynamodb", "fixedwindow", 6},
		{"dynamodb", "tokenbucket", 5},
	} {
		t.Run(c.store+"/"+c.strategy, func(t *testing.T) {
			args := []string{"-store", c.store, "-strategy", c.strategy, "-limit", "5", "-window", "24h"}
			switch c.store {
			case "redis":
				args = append(args, "-redis", redistest.Start(t).String())
			case "dynamodb": // the service creates the table
				args = append(args, "-dynamodb-endpoint", dynalitetest.Start(t).Endpoint, "-dynamodb-table", "limits")
			}
			awayFromMidnight()
			s := start(t, args...)
			first := time.Now() // before alice's first call
			for i := range 5 {
				resp, body := s.get(t, "/ping", "alice")
				want := `"5-per-86400s";r=` + strconv.Itoa(4-i)
				if resp.StatusCode != http.StatusOK || string(body) != "{\"message\":\"pong\"}\n" ||
					!strings.HasPrefix(resp.Header.Get("RateLimit"), want) {
					t.Fatalf("call %d: %s %s RateLimit %q; want 200, pong, %s", i+1, resp.Status, body, resp.Header.Get("RateLimit"), want)
				}
				if got := resp.Header.Get("RateLimit-Policy"); got != `"5-per-86400s";q=5;w=86400` {
					t.Errorf("RateLimit-Policy %q", got)
				}
			}
			sixth := time.Now()
			resp, body := s.get(t, "/ping", "alice")
			answered := time.Now()
			retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != http.StatusTooManyRequests || err != nil || retry < 1 {
				t.Fatalf("sixth call: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
			}
			// The wait the service gives is the one its strategy implies, to the second (3 s
			// either way for its rounding), seen from when the service decided: between the
			// sixth call and its answer, and for the bucket and the rolling window, whose wait
			// runs from alice's first call, after first. Time a loaded machine takes between
			// the steps widens the range; it cannot fail the test.
			var lo, hi float64
			switch c.strategy {
			case "fixedwindow":
				end := sixth.Truncate(24 * time.Hour).Add(24 * time.Hour)
				lo, hi = end.Sub(answered).Seconds(), end.Sub(sixth).Seconds()
			case "tokenbucket":
				lo, hi = 86400.0/5-answered.Sub(first).Seconds(), 86400.0/5 // one token refills in a fifth of the window
			default:
				lo, hi = 86400-answered.Sub(first).Seconds(), 86400 // the first of the five calls leaves the window
			}
			if lo, hi = lo-3, hi+3; float64(retry) < lo || float64(retry) > hi {
				t.Errorf("Retry-After %d, want %.0f to %.0f", retry, lo, hi)
			}
			var p map[string]any
			if err := json.Unmarshal(body, &p); err != nil || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("problem body %s (%v), Content-Type %q", body, err, resp.Header.Get("Content-Type"))
			}
			wantP := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": float64(429), "instance": "/ping",
				"detail": `Rate limit "5-per-86400s" (5 per 86400s) is used up; retry after ` + strconv.Itoa(retry) + " s."}
			for k, v := range wantP {
				if p[k] != v {
					t.Errorf("problem %s = %v, want %v", k, p[k], v)
				}
			}
			// The client side of the library reads the service's fields back.
			pol := headers.ParseIETF(resp.Header)
			if len(pol) != 1 || pol[0].Name != "5-per-86400s" || pol[0].Remaining != 0 || pol[0].Quota != 5 || pol[0].Window != 24*time.Hour ||
				pol[0].Reset < time.Second {
				t.Errorf("headers.ParseIETF read %+v", pol)
			}
			if resp, _ := s.get(t, "/ping", "bob"); resp.StatusCode != http.StatusOK {
				t.Errorf("bob: %s, want 200", resp.Status)
			}
			for range 2 { // /status does not count
				st := s.status(t, "?key=alice")
				// The wait has shrunk by the time since the sixth call, in whole seconds.
				gone := int64(time.Since(sixth)/time.Second) + 1
				if st.Key != "key:alice" || st.Strategy != c.strategy || len(st.Rules) != 1 || st.RetryAfter > int64(retry)+2 || st.RetryAfter < int64(retry)-2-gone ||
					st.Rules[0].Used != c.usedAfter || st.Rules[0].Remaining != 0 || st.Rules[0].Limit != 5 {
					t.Errorf("status of alice: %+v, want used %d", st, c.usedAfter)
				}
			}
			if st := s.status(t, ""); st.Key != "ip:127.0.0.1" || st.Rules[0].Used != 0 || st.RetryAfter != 0 {
				t.Errorf("own status: %+v, want ip:127.0.0.1 unused", st)
			}
			if resp, _ := s.get(t, "/ping", ""); resp.StatusCode != http.StatusOK {
				t.Errorf("no key header: %s", resp.Status)
			}
			want2 := map[string]int{"key:alice": 5, "key:bob": 1, "ip:127.0.0.1": 1}
			if got := s.audited(t); len(got) != 3 || got["key:alice"] != 5 || got["key:bob"] != 1 || got["ip:127.0.0.1"] != 1 {
				t.Errorf("api_calls = %v, want %v", got, want2)
			}
		})
	}
}
