package redisstore

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestXeroDayResumesAtXerosResetOverRedis: profiles.Xero over the Redis store, against Xero's
// stand-in, whose tenant day resets 15 min after the start with 3 calls left. Each call is sent
// when the Transport's wait says it may: 3 accepted at 0 s (the third with
// X-DayLimit-Remaining: 0); one probe a minute later, refused with a day 429 whose Retry-After
// is 14 min; then calls accepted from the reset on, to the second, where the rolling day rule
// alone would have held the tenant for a day.
func TestXeroDayResumesAtXerosResetOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewManual(t0)
	x := standin.NewXero(clk.Now)
	const tenant = "tenant-redis"
	start := x.DayEnds(tenant, clk.Now()).Add(24*time.Hour - 15*time.Minute)
	clk.Set(start)
	x.UseDay(tenant, 5000-3)
	st := newStore(t, srv.Client(), Options{Clock: clk, Prefix: "xeroday"})
	tr, err := ratemonitor.New(handlerTransport{x}, append(profiles.Xero("xero-app:test").Options(),
		ratemonitor.WithStore(st), ratemonitor.WithClock(clk), ratemonitor.WithInFlightLease(48*time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	ctx := context.Background()
	var log []string
	for range 6 {
		req, _ := http.NewRequest(http.MethodGet, "https://api.xero.com/api.xro/2.0/Invoices", nil)
		req.Header.Set("Xero-Tenant-Id", tenant)
		s, err := tr.Status(ctx, tr.Key(req))
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(s.Wait)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		log = append(log, clk.Now().Sub(start).String()+":"+strconv.Itoa(resp.StatusCode))
	}
	got := strings.Join(log, " ")
	want := "0s:200 0s:200 0s:200 1m0s:429 15m0s:200 15m0s:200"
	if got != want {
		t.Errorf("calls (instant from the start: status):\n got %s\nwant %s", got, want)
	}
}

// handlerTransport answers every request with h, in process.
type handlerTransport struct{ h http.Handler }

func (rt handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
