package profiles_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// Pacing a Xero client takes three lines; here against a local stand-in of Xero, on a virtual
// clock so that the minute passes at once: 61 calls for one tenant, the 61st a minute (and the
// 1 s margin) after the first, none refused.
func ExampleXero() {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	clk.Auto = true // a paced wait moves the clock instead of sleeping
	xero := standin.NewXero(clk.Now)
	srv := httptest.NewServer(xero)
	defer srv.Close()

	tr, err := ratemonitor.New(srv.Client().Transport, append(profiles.Xero("xero-app:example"), ratemonitor.WithClock(clk))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}

	start := clk.Now()
	for range 61 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api.xro/2.0/Invoices", nil)
		req.Header.Set("Xero-Tenant-Id", "tenant-1")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	n, _, last := xero.Accepted()
	fmt.Printf("%d accepted, %d refused, the last after %v\n", n, xero.Refused(), last.Sub(start))
	// Output: 61 accepted, 0 refused, the last after 1m1s
}
