package fixedcount

import (
	"testing"
	"time"
)

// TestShiftCarriesCountIntoAlignedWindow: the count carries into the aligned window that holds the
// shifted latest instant; it is never a fresh window.
func TestShiftCarriesCountIntoAlignedWindow(t *testing.T) {
	c := NewCounter(time.Minute)
	c.Add(time.Unix(36050, 0), 7) // window [36000, 36060)
	c.Shift(-(time.Hour + 20*time.Second))
	if got := c.Latest(); !got.Equal(time.Unix(32430, 0)) {
		t.Fatalf("latest = %v, want 32430 s", got.Unix())
	}
	if got := c.Used(time.Unix(32430, 0)); got != 7 {
		t.Errorf("used = %d, want 7", got)
	}
	if start, count := c.State(); !start.Equal(time.Unix(32400, 0)) || count != 7 {
		t.Errorf("state = %v, %d; want 32400 s, 7", start.Unix(), count)
	}
	if got := c.WaitTime(time.Unix(32430, 0), 54, 60); got != 30*time.Second {
		t.Errorf("wait(54) = %v, want 30s (the window [32400, 32460) ends)", got)
	}
	if got := c.Expiry(); !got.Equal(time.Unix(32460, 0)) {
		t.Errorf("expiry = %v, want 32460 s", got.Unix())
	}
	if got := c.Used(time.Unix(32460, 0)); got != 0 {
		t.Errorf("used at 32460 = %d, want 0", got)
	}
	e := NewCounter(time.Minute)
	e.Shift(-time.Hour)
	if !e.Latest().IsZero() || !e.Expiry().IsZero() {
		t.Errorf("empty counter after a shift: latest %v, expiry %v; want zero", e.Latest(), e.Expiry())
	}
}

// TestAddNeverDrops: 130 attempts dated an hour before the latest instant count in the
// current window (the issue-13 clock step: dropped before).
func TestAddNeverDrops(t *testing.T) {
	c := NewCounter(time.Minute)
	c.Add(time.Unix(36050, 0), 1)
	for range 130 {
		c.Add(time.Unix(32450, 0), 1)
	}
	if got := c.Used(time.Unix(36050, 0)); got != 131 {
		t.Errorf("used = %d, want 131", got)
	}
}
