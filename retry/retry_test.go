package retry

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTransport(t *testing.T, opts ...ratemonitor.Option) *ratemonitor.Transport {
	t.Helper()
	tr, err := ratemonitor.New(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func fetch(t *testing.T, c *retryablehttp.Client, ctx context.Context, url string) (*http.Response, error) {
	t.Helper()
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}
