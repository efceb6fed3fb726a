package ratemonitor_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// shopifyCostBody is a Shopify GraphQL answer of the given data size whose actual cost is
// actual, on a bucket of 1000.
func shopifyCostBody(dataBytes, actual int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"data":{"blob":"%s"},"extensions":{"cost":{"requestedQueryCost":%d,"actualQueryCost":%d,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":%d,"restoreRate":50.0}}}}`,
		strings.Repeat("x", dataBytes), actual, actual, 1000-actual)
	return b.Bytes()
}

// shopifyUsed sends one query (charged 1: the estimate) to an upstream answering body,
// gzip'd when gz, and returns the bucket's usage after the correction.
func shopifyUsed(t *testing.T, body []byte, gz bool) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if gz {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(body)
			zw.Close()
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	tr := shopifyTransport(t, srv)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip") // as a client that decompresses itself does
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	u, err := tr.AllocationUsed(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	return u[0].Used
}

// TestShopifyCostCorrectedPastMaxBodyAndGzip: a query charged 1 that Shopify says cost 50 is
// corrected to 50 for a small body (the control case), a body over cost.MaxBody (extensions
// read from its tail) and a gzip'd body.
func TestShopifyCostCorrectedPastMaxBodyAndGzip(t *testing.T) {
	for _, c := range []struct {
		name      string
		dataBytes int
		gzip      bool
	}{
		{"small plain body", 100, false},
		{"body over cost.MaxBody", cost.MaxBody + 1, false},
		{"gzip'd body", 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := shopifyUsed(t, shopifyCostBody(c.dataBytes, 50), c.gzip); got != 50 {
				t.Errorf("%s: used %d after a query Shopify says cost 50, want 50", c.name, got)
			}
		})
	}
}

// TestCostCorrectedWhenDecoderStopsAtValueEnd: a Shopify GraphQL answer sent chunked (the
// server flushes the JSON, then ends the body 100 ms later), read the usual Go way,
// json.NewDecoder(resp.Body).Decode(&v), then Close. The decoder has the whole JSON value and
// stops without reading io.EOF; the Close hands the value read to the reader, and the query
// charged 1 that Shopify says cost 50 is corrected to exactly 50.
func TestCostCorrectedWhenDecoderStopsAtValueEnd(t *testing.T) {
	body := shopifyCostBody(100, 50)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond) // the terminating chunk comes later
	}))
	defer srv.Close()
	tr := shopifyTransport(t, srv)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v["extensions"] == nil {
		t.Fatal("decoded no extensions: the control case")
	}
	resp.Body.Close()
	if u := used(t, tr, "shop"); u != 50 {
		t.Errorf("used %d after a whole JSON answer decoded with json.Decoder (chunked body, EOF not read), want 50 (Shopify says it cost 50)", u)
	}
}

// shopifyTransport paces srv's single key "shop" on Shopify GraphQL's bucket of 1000 points
// refilled at 50 a second, on a manual clock, charging 1 per query before the send and
// correcting it from the answer's cost extension; it is closed when the test ends.
func shopifyTransport(t *testing.T, srv *httptest.Server) *ratemonitor.Transport {
	t.Helper()
	rule, err := tokenbucket.Rule(1000, 50)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	tr, err := ratemonitor.New(srv.Client().Transport, ratemonitor.WithStrategy(s), ratemonitor.WithPacing(),
		ratemonitor.WithClock(clk), ratemonitor.WithKeyFunc(func(*http.Request) string { return "shop" }),
		ratemonitor.WithCost(func(*http.Request) int { return 1 }),
		ratemonitor.WithCostReport(cost.ShopifyGraphQL(rule.Window)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}
