package ratemonitor

import (
	"strings"
	"testing"
	"time"
)

// docs/sync.md: "a window named there must be a rule's, of the request's key or of a meter
// (New fails otherwise)". A Transport made without rules has no rule at New.
func TestNewRefusesFixedWithoutRules(t *testing.T) {
	tr, err := New(nil, WithSync(SyncConfig{Fixed: map[time.Duration]time.Duration{time.Hour: 0}}))
	if err == nil {
		tr.Close()
		t.Fatal("New accepted Fixed naming a window no rule has (no rules at all)")
	}
	if !strings.Contains(err.Error(), "Fixed") {
		t.Fatalf("error does not name Fixed: %v", err)
	}

}
