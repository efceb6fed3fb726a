package ratemonitor

import (
	"net/http"
	"testing"

	"github.com/ratemonitor/ratemonitor/internal/leakcheck"
)

// BenchmarkKeyByHeader: the cost hashing adds per request (a credential header against a
// tenant id).
func BenchmarkKeyByHeader(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	req.Header.Set("Authorization", leakcheck.Bearer)
	req.Header.Set("Xero-Tenant-Id", "tenant-1")
	for _, name := range []string{"Xero-Tenant-Id", "Authorization"} {
		f := KeyByHeader(name, nil)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = f(req)
			}
		})
	}
}
