package ratemonitor_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

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
	defer tr.Close()
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
