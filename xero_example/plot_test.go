package main

import (
	"bytes"
	"context"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestChartDataSeriesFromCallLog: the chart's series from a small hand-made log, at scale 10 (a
// Xero minute is 6 s of real time, so 100 ms real is 1 s on the chart's x axis).
func TestChartDataSeriesFromCallLog(t *testing.T) {
	o := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return o.Add(time.Duration(ms) * time.Millisecond) }
	logs := []callLog{
		{
			tenant: "a",
			// another app's call 10 s (Xero) before the run; two at the start; one at 5 s; one at
			// 60 s, the instant the two at the start stop counting. Given out of order.
			accepted: []time.Time{at(500), at(-1000), at(0), at(6000), at(0)},
			refused:  []time.Time{at(5500), at(200)},
		},
		{tenant: "b"},
	}
	got := chartData(logs, o, at(7000), 6*time.Second, 10)
	if len(got) != 2 || got[0].tenant != "a" || got[1].tenant != "b" {
		t.Fatalf("series %+v", got)
	}
	a := got[0]
	wantUsage := []point{
		{0, 3},  // the other app's call and the two at the start
		{5, 4},  // one more
		{50, 3}, // the other app's call is a minute old
		{60, 2}, // the two at the start leave as one arrives
		{65, 1}, // the call at 5 s leaves
		{70, 1}, // the run's end
	}
	if !reflect.DeepEqual(a.usage, wantUsage) {
		t.Errorf("usage %v, want %v", a.usage, wantUsage)
	}
	wantRefused := []point{{2, 3}, {55, 3}} // by time; the window's count at each 429
	if !reflect.DeepEqual(a.refused, wantRefused) {
		t.Errorf("429 marks %v, want %v", a.refused, wantRefused)
	}
	wantRate := make([]int, 70) // 70 s of Xero time; the other app's call is before the run
	wantRate[0], wantRate[2], wantRate[5], wantRate[55], wantRate[60] = 2, 1, 1, 1, 1
	if !reflect.DeepEqual(a.perSecond, wantRate) {
		t.Errorf("per second %v, want %v", a.perSecond, wantRate)
	}
	b := got[1]
	if !reflect.DeepEqual(b.usage, []point{{0, 0}, {70, 0}}) || len(b.refused) != 0 || !reflect.DeepEqual(b.perSecond, make([]int, 70)) {
		t.Errorf("an idle tenant: %+v", b)
	}
}

// TestRunPlotWritesChart: -plot writes an SVG or a PNG of the run, with the tenants and the limit
// line, and the 429s when another app's calls cause some. The run with the other app's calls
// must meet them while they count (30 × 429 for tenant-1): it runs at scale 20, where their
// minute is 3 s of real time, which a loaded machine's start of the run cannot use up, and sends
// 60 requests a tenant, which all go in that minute.
func TestRunPlotWritesChart(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file                     string
		foreign, scale, requests string
	}{{"run.svg", "0", "60", "90"}, {"run.png", "0", "60", "90"}, {"foreign.svg", "30", "20", "60"}} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			cfg, err := parseFlags([]string{"-scale", c.scale, "-tenants", "2", "-requests", c.requests, "-progress", "0", "-margin", testMargin.String(),
				"-foreign", c.foreign, "-plot", path}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			sum, err := run(context.Background(), cfg, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if c.foreign == "0" && sum.tooMany != 0 {
				t.Fatalf("429s %d\n%s", sum.tooMany, out.String())
			}
			if !strings.Contains(out.String(), "chart           "+path) {
				t.Errorf("output does not name the chart:\n%s", out.String())
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(path, ".png") {
				img, err := png.Decode(bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				// 10 × 6.5 inches at 96 dpi: a header and two panels.
				if b := img.Bounds(); b.Dx() != 960 || b.Dy() != 624 {
					t.Errorf("PNG %v, want 960×624", b)
				}
				return
			}
			svg := string(data)
			if !strings.HasPrefix(svg, "<?xml") || !strings.Contains(svg, "<svg") || !strings.HasSuffix(strings.TrimSpace(svg), "</svg>") {
				t.Errorf("not an SVG document: %.200s", svg)
			}
			want := []string{"tenant-1", "tenant-2", limitLabel, "scale " + c.scale + "×", "2 tenants × " + c.requests + " requests", "s of Xero time"}
			if c.foreign != "0" {
				want = append(want, refusedLabel, "tenant-1: 30 × 429")
			} else if strings.Contains(svg, refusedLabel) {
				t.Errorf("a run without 429s has the 429 legend")
			}
			for _, w := range want {
				if !strings.Contains(svg, w) {
					t.Errorf("SVG lacks %q", w)
				}
			}
		})
	}
}

// TestPlotFlagRefusesUnknownFormatOrDir: a -plot file whose extension names no format, or whose
// directory does not exist, is refused before the run.
func TestPlotFlagRefusesUnknownFormatOrDir(t *testing.T) {
	for _, path := range []string{"run.gif", "run", "run.svg.txt", filepath.Join(t.TempDir(), "missing", "run.svg")} {
		_, err := parseFlags([]string{"-plot", path}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "-plot") {
			t.Errorf("-plot %s: %v", path, err)
		}
	}
	if _, err := parseFlags([]string{"-plot", "run.gif"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("the error does not say which extensions work: %v", err)
	}
	for _, path := range []string{"run.svg", "RUN.PNG", filepath.Join(t.TempDir(), "x.png")} {
		if _, err := parseFlags([]string{"-plot", path}, &bytes.Buffer{}); err != nil {
			t.Errorf("-plot %s: %v", path, err)
		}
	}
}

// TestRunPlotClientSideFromSendInstants: against a real API (here a stand-in the example did not
// start) the chart is drawn from the client's send instants, and says so.
func TestRunPlotClientSideFromSendInstants(t *testing.T) {
	up := newUpstream(60, false)
	srv := httptest.NewServer(up)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "client.svg")
	cfg := config{scale: 60, requests: 20, burst: 10, margin: testMargin, path: "/api.xro/2.0/Invoices",
		baseURL: srv.URL, tenantIDs: []string{"real-tenant"}, plot: path}
	var out bytes.Buffer
	if sum, err := run(context.Background(), cfg, &out); err != nil || sum.sent != 20 || sum.tooMany != 0 {
		t.Fatalf("%v, sent %d, 429s %d\n%s", err, sum.sent, sum.tooMany, out.String())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"real-tenant", "client side", limitLabel} {
		if !strings.Contains(string(data), w) {
			t.Errorf("SVG lacks %q", w)
		}
	}
}
