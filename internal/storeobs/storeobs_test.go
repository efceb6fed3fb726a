package storeobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/observetest"
	"github.com/ratemonitor/ratemonitor/observe"
)

func TestStoreFailedReportsOnlyStoreErrors(t *testing.T) {
	rec := &observetest.Recorder{}
	boom := errors.New("boom")
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if Failed(ctx, nil, "s", "op", "k", boom) != boom || Failed(ctx, rec, "s", "op", "k", nil) != nil {
		t.Fatal("wrong error returned")
	}
	Failed(cancelled, rec, "s", "op", "k", boom)                            // the caller gave up
	Failed(ctx, rec, "s", "op", "k", fmt.Errorf("x: %w", context.Canceled)) // the same
	Failed(ctx, rec, "redis", "record", "k", boom)
	var f observe.Observer = observe.Func(rec.Observe)
	f.Observe(observe.Event{Kind: observe.Refused, Key: "k", N: 2, Wait: time.Second})
	f.Observe(observe.Event{Kind: observe.Paused, Key: "k", Until: time.Unix(5, 0)})
	want := []string{"store_error store=redis op=record key=k err=boom", "refused key=k n=2 wait=1s",
		"paused key=k until=1970-01-01T00:00:05Z"}
	if got := rec.Strings(); !slices.Equal(got, want) {
		t.Fatalf("%q", got)
	}
}
