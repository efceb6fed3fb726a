package ratemonitor_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// ExampleWithInFlight: at most 2 requests of a tenant in flight; a third waits until a body
// is closed.
func ExampleWithInFlight() {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	tr, err := ratemonitor.New(nil,
		ratemonitor.WithRules(strategy.Rule{Limit: 60, Window: time.Minute}),
		ratemonitor.WithKeyFunc(ratemonitor.KeyByHeader("Xero-Tenant-Id", nil)),
		ratemonitor.WithPacing(),
		ratemonitor.WithInFlight(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	get := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Xero-Tenant-Id", "tenant-1")
		return client.Do(req)
	}
	a, err := get(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := get(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("in flight:", tr.InFlight("tenant-1"))

	// A third request waits for a slot; here it gives up after 20 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = get(ctx)
	cancel()
	fmt.Println("third:", err != nil)

	a.Body.Close() // frees a slot
	c, err := get(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("in flight:", tr.InFlight("tenant-1"))
	b.Body.Close()
	io.ReadAll(c.Body) // reading to EOF frees it too
	fmt.Println("in flight:", tr.InFlight("tenant-1"))
	c.Body.Close()
	// Output:
	// in flight: 2
	// third: true
	// in flight: 2
	// in flight: 0
}
