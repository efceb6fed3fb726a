package ratemonitor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// returnLimit bounds, in real time, how long a test waits for a RoundTrip that returns at once
// when the Transport works (in milliseconds) and never when it does not: generous, so that a
// loaded machine does not fail it.
const returnLimit = 30 * time.Second

// githubAnswer is a GraphQL answer whose rateLimit says the query cost 7 (charged 1).
const githubAnswer = `{"data":{"viewer":{"login":"x"},"rateLimit":{"cost":7,"remaining":4993,"limit":5000}}}`

// bodyCostTransport sends through a Transport charging 1 per query and reading GitHub's cost
// from the body, with opts, to an upstream answering status (and githubAnswer unless 204/304).
func bodyCostTransport(t *testing.T, status int, opts ...ratemonitor.Option) (*ratemonitor.Transport, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			w.Write([]byte(githubAnswer))
		}
	}))
	t.Cleanup(srv.Close)
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(srv.Client().Transport, append([]ratemonitor.Option{ratemonitor.WithClock(clk), ratemonitor.WithPacing(),
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithKeyFunc(func(*http.Request) string { return "k" }),
		ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, srv.URL
}

// TestCostReportCorrectsAtEndOfBody: the charge stands (1) when RoundTrip returns and while the
// body is being read, and is the body's cost (7) once the caller has read it to its end; the
// bytes the caller reads are the upstream's.
func TestCostReportCorrectsAtEndOfBody(t *testing.T) {
	tr, url := bodyCostTransport(t, http.StatusOK)
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if u := used(t, tr, "k"); u != 1 {
		t.Errorf("used %d when RoundTrip returned, want 1 (the body is not read yet)", u)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != githubAnswer {
		t.Fatalf("the caller read %q, %v", b, err)
	}
	if u := used(t, tr, "k"); u != 7 {
		t.Errorf("used %d after the body was read, want 7", u)
	}
}

// TestCostReportReturnsAtHeader: with WithCostReport, RoundTrip returns when the response's header
// has arrived, while the upstream is still streaming the JSON body (before issue 15's fix it
// waited for the whole body).
func TestCostReportReturnsAtHeader(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":`))
		w.(http.Flusher).Flush()
		<-release // the rest of the body comes later
		w.Write([]byte(`{"rateLimit":{"cost":1,"remaining":4999,"limit":5000}}}`))
	}))
	defer srv.Close()
	defer close(release)
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp != nil {
			resp.Body.Close()
		}
	case <-time.After(returnLimit):
		t.Errorf("RoundTrip had not returned %v after the response's header arrived: it waits for the whole body", returnLimit)
		release <- struct{}{}
		if resp := <-done; resp != nil {
			resp.Body.Close()
		}
	}
}

// TestCostReportBodyClosedEarlyKeepsCharge: a body closed before its end is not parsed: the
// charge made before the send (1) stands.
func TestCostReportBodyClosedEarlyKeepsCharge(t *testing.T) {
	tr, url := bodyCostTransport(t, http.StatusOK)
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	io.ReadFull(resp.Body, buf)
	resp.Body.Close()
	if u := used(t, tr, "k"); u != 1 {
		t.Errorf("used %d after a body closed early, want 1", u)
	}
}

// TestCostReportSkipsBodilessResponses: a HEAD, a 204 and a 304 are not watched: their body is
// the one net/http returned, and the charge stands.
func TestCostReportSkipsBodilessResponses(t *testing.T) {
	for _, c := range []struct {
		method string
		status int
	}{{http.MethodHead, http.StatusOK}, {http.MethodGet, http.StatusNoContent}, {http.MethodGet, http.StatusNotModified}} {
		t.Run(fmt.Sprint(c.method, " ", c.status), func(t *testing.T) {
			tr, url := bodyCostTransport(t, c.status)
			req, _ := http.NewRequest(c.method, url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Body != http.NoBody {
				t.Errorf("%s %d: the body is a %T, not net/http's http.NoBody", c.method, c.status, resp.Body)
			}
			resp.Body.Close()
			if u := used(t, tr, "k"); u != 1 {
				t.Errorf("%s %d: used %d, want 1", c.method, c.status, u)
			}
		})
	}
}

// TestCostReportLeavesSwitchingProtocolsBody: a 101 response (a WebSocket upgrade) is returned at
// once, its body still the io.ReadWriteCloser net/http gives.
func TestCostReportLeavesSwitchingProtocolsBody(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	tr, err := ratemonitor.New(srv.Client().Transport,
		ratemonitor.WithRules(strategy.Rule{Limit: 5000, Window: time.Hour}),
		ratemonitor.WithCostReport(cost.GitHubGraphQL(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		resp, _ := tr.RoundTrip(req)
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp == nil {
			t.Fatal("no response")
		}
		defer resp.Body.Close()
		if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
			t.Errorf("the 101 response's body is a %T, not the io.ReadWriteCloser net/http returns", resp.Body)
		}
	case <-time.After(returnLimit):
		t.Errorf("RoundTrip of a 101 had not returned after %v: the cost reader reads the upgraded connection", returnLimit)
		release <- struct{}{}
		if resp := <-done; resp != nil {
			resp.Body.Close()
		}
	}
}

// TestCostReportCorrectedBeforeTheInFlightSlotFrees: with WithInFlight, the cost is corrected
// before the slot frees at the end of the body: once the caller has read it, the key holds no call
// in flight and has the real cost recorded.
func TestCostReportCorrectedBeforeTheInFlightSlotFrees(t *testing.T) {
	tr, url := bodyCostTransport(t, http.StatusOK, ratemonitor.WithInFlight(1))
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if n := tr.InFlight("k"); n != 1 {
		t.Errorf("%d in flight before the body is read, want 1", n)
	}
	io.Copy(io.Discard, resp.Body)
	if n, u := tr.InFlight("k"), used(t, tr, "k"); n != 0 || u != 7 {
		t.Errorf("after the body's end: %d in flight, used %d; want 0 and 7", n, u)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), returnLimit) // a slot still held: it waits until then
	defer cancel()
	req2, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	resp2, err := tr.RoundTrip(req2)
	if err != nil {
		t.Fatalf("a second call after the first's body ended: %v", err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if u := used(t, tr, "k"); u != 14 {
		t.Errorf("used %d after two queries of cost 7, want 14", u)
	}
}

// TestCostReportBodyFiguresLearnt: with WithSync, the remaining points of the body's rateLimit
// (4993 of 5000) are applied once the body has been read: used 7, the cost and the figure
// agreeing.
func TestCostReportBodyFiguresLearnt(t *testing.T) {
	tr, url := bodyCostTransport(t, http.StatusOK, ratemonitor.WithSync(ratemonitor.SyncConfig{Readers: []headers.Reader{}}))
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	st, err := tr.Status(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Rules[0]; r.Used != 7 || r.Reported != 4993 {
		t.Errorf("after the body: %+v, want used 7 and reported 4993", r)
	}
}

// TestCostReportImpossibleCostReported: a real cost above the rule's limit is not recorded:
// the charge (1) stands, and the error handler hears of it, naming WithCostReport.
func TestCostReportImpossibleCostReported(t *testing.T) {
	var got []string
	tr, _ := bodyCostTransport(t, http.StatusOK,
		ratemonitor.WithErrorHandler(func(_ *http.Request, key string, err error) { got = append(got, key+": "+err.Error()) }))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":{"rateLimit":{"cost":6000}}}`))
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if u := used(t, tr, "k"); u != 1 || len(got) != 1 || !strings.Contains(got[0], "WithCostReport") || !strings.Contains(got[0], "cost 6000") {
		t.Errorf("used %d, reports %q; want 1 and one report naming WithCostReport and cost 6000", u, got)
	}
}
