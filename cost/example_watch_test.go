package cost_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/cost"
)

// Watch hands a BodyReader what the caller read, once the caller reaches the body's end: the
// caller is not kept waiting for it.
func ExampleWatch() {
	body := `{"data":{},"extensions":{"cost":{"requestedQueryCost":12,"actualQueryCost":9}}}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body))}
	r := cost.ShopifyGraphQL(20 * time.Second)
	if cost.Wants(resp) {
		cost.Watch(resp, func(b cost.Body) {
			fmt.Println("cost:", r.ReadBody(resp, b, time.Time{}).Cost)
		})
	}
	b, err := io.ReadAll(resp.Body) // the caller reads as usual
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("read:", len(b), "bytes")
	// Output:
	// cost: 9
	// read: 79 bytes
}
