package observe

import (
	"fmt"
	"testing"
)

func TestKindStringNamesEachKind(t *testing.T) {
	if got := fmt.Sprint(Recorded, StoreError, Rejected, SkewedDate, Kind(0), Kind(99)); got != "recorded store_error rejected skewed_date Kind(0) Kind(99)" {
		t.Fatal(got)
	}
}
