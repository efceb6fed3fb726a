package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// scrape returns the samples of GET /metrics, by their name and labels as written.
func (s service) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	resp, body := s.get(t, "/metrics", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	lines := bufio.NewScanner(strings.NewReader(string(body)))
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsMoveByDecisions starts the service, sends 6 requests for one client under 5 a day
// and finds /metrics moving by exactly 5 admitted and 1 refused, and the usage ratio at 6/5 (the
// fixed window counts the refused attempt). The window is the UTC day, away from its end (an
// hour's window could end between the requests of a slow run, and admit the sixth).
func TestMetricsMoveByDecisions(t *testing.T) {
	awayFromMidnight()
	svc := start(t, "-limit", "5", "-window", "24h")
	before := svc.scrape(t)
	if before["ratemonitor_admitted_total"] != 0 || before["ratemonitor_refused_total"] != 0 {
		t.Fatalf("before: %v", before)
	}
	for i := range 6 {
		resp, _ := svc.get(t, "/ping", "client-1")
		if want := map[bool]int{true: 200, false: 429}[i < 5]; resp.StatusCode != want {
			t.Fatalf("request %d: %s", i+1, resp.Status)
		}
	}
	after := svc.scrape(t)
	for name, delta := range map[string]float64{
		"ratemonitor_admitted_total": 5,
		"ratemonitor_refused_total":  1,
		"ratemonitor_recorded_total": 0,
	} {
		if got := after[name] - before[name]; got != delta {
			t.Errorf("%s moved by %v, want %v", name, got, delta)
		}
	}
	if got := after[`ratemonitor_usage_ratio{rule="5/24h0m0s"}`]; got != 1.2 {
		t.Errorf("usage ratio %v, want 1.2", got)
	}
	if _, ok := after["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
}

// TestMetricsKeysCappedWithOther: with -metrics-keys 2, three clients give two key labels and
// "other".
func TestMetricsKeysCappedWithOther(t *testing.T) {
	svc := start(t, "-limit", "5", "-window", "1h", "-metrics-keys", "2")
	for _, key := range []string{"a", "b", "c", "c", "a"} {
		svc.get(t, "/ping", key)
	}
	m := svc.scrape(t)
	for series, want := range map[string]float64{
		`ratemonitor_admitted_total{key="key:a"}`: 2,
		`ratemonitor_admitted_total{key="key:b"}`: 1,
		`ratemonitor_admitted_total{key="other"}`: 2,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	if _, ok := m[`ratemonitor_admitted_total{key="key:c"}`]; ok {
		t.Error("a third key got a label of its own")
	}
}
