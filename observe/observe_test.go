package observe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestKindStringNamesEachKind(t *testing.T) {
	if got := fmt.Sprint(Recorded, StoreError, Rejected, SkewedDate, Kind(0), Kind(99)); got != "recorded store_error rejected skewed_date Kind(0) Kind(99)" {
		t.Fatal(got)
	}
}

func TestStoreFailedReportsOnlyStoreErrors(t *testing.T) {
	rec := &Recorder{}
	boom := errors.New("boom")
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if StoreFailed(ctx, nil, "s", "op", "k", boom) != boom || StoreFailed(ctx, rec, "s", "op", "k", nil) != nil {
		t.Fatal("wrong error returned")
	}
	StoreFailed(cancelled, rec, "s", "op", "k", boom)                            // the caller gave up
	StoreFailed(ctx, rec, "s", "op", "k", fmt.Errorf("x: %w", context.Canceled)) // the same
	StoreFailed(ctx, rec, "redis", "record", "k", boom)
	var f Observer = Func(rec.Observe)
	f.Observe(Event{Kind: Refused, Key: "k", N: 2, Wait: time.Second})
	f.Observe(Event{Kind: Paused, Key: "k", Until: time.Unix(5, 0)})
	want := []string{"store_error store=redis op=record key=k err=boom", "refused key=k n=2 wait=1s",
		"paused key=k until=1970-01-01T00:00:05Z"}
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
}
