package standin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// xeroSend has x answer one call of tenant.
func xeroSend(x *Xero, tenant string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "http://api.xero.test/api.xro/2.0/Invoices", nil)
	req.Header.Set("Xero-Tenant-Id", tenant)
	x.ServeHTTP(rec, req)
	return rec
}

// TestXeroMinuteIsAFixedWindowOfTheTenant: Xero counts a tenant's minute in a fixed window that
// starts at an offset of the tenant's own. The 61st call in it is a 429 whose Retry-After is the
// seconds to the window's end, and at that end 60 more go at once (a rolling minute would hold
// them a minute after the first 60); another tenant's window ends at another instant.
func TestXeroMinuteIsAFixedWindowOfTheTenant(t *testing.T) {
	now := t0
	x := NewXero(func() time.Time { return now })
	end := x.MinuteEnds("t1", now)
	if d := end.Sub(now); d <= 0 || d > time.Minute {
		t.Fatalf("t1's minute ends %v after t0, want within a minute", d)
	}
	if x.MinuteEnds("t2", now).Equal(end) && x.MinuteEnds("t3", now).Equal(end) {
		t.Errorf("tenants t1, t2 and t3 share the minute's end %v: each tenant's window should start at an offset of its own", end)
	}
	now = end.Add(-time.Minute) // the start of t1's window
	for i := range 60 {
		if rec := xeroSend(x, "t1"); rec.Code != http.StatusOK {
			t.Fatalf("call %d: %d, want 200", i+1, rec.Code)
		}
	}
	now = end.Add(-1500 * time.Millisecond)
	rec := xeroSend(x, "t1")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("X-Rate-Limit-Problem") != "minute" {
		t.Fatalf("the 61st call 1.5 s before the window ends: %d, Retry-After %q, problem %q; want 429, 2 (whole seconds, rounded up), minute",
			rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-Rate-Limit-Problem"))
	}
	now = end
	for i := range 60 {
		if rec := xeroSend(x, "t1"); rec.Code != http.StatusOK {
			t.Fatalf("call %d of the next window, at its start: %d, want 200", i+1, rec.Code)
		}
	}
	if got := xeroSend(x, "t1").Header().Get("X-MinLimit-Remaining"); got != "0" {
		t.Errorf("X-MinLimit-Remaining %q after 60 calls of the window, want 0", got)
	}
}
