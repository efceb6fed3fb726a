package cache

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
)

// TestMemoryLimits: PutLimits keeps a copy of the value until its ttl has passed on the store's
// clock (0: for good), replacing the one before; Limits returns a copy, nil when none or
// expired; a negative ttl is refused; after Close both return ErrClosed.
func TestMemoryLimits(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	m, err := NewMemory(MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	v := []byte("one")
	if err := m.PutLimits(ctx, "k", v, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	v[0] = 'X'
	got, err := m.Limits(ctx, "k")
	if err != nil || string(got) != "one" {
		t.Fatalf("Limits = %q, %v; want one", got, err)
	}
	got[0] = 'Y'
	clk.Advance(10*time.Second - time.Nanosecond)
	if got, _ := m.Limits(ctx, "k"); string(got) != "one" {
		t.Errorf("1 ns before its ttl: %q, want one", got)
	}
	clk.Advance(time.Nanosecond)
	if got, err := m.Limits(ctx, "k"); got != nil || err != nil {
		t.Errorf("at its ttl: %q, %v; want nil, nil", got, err)
	}
	if err := m.PutLimits(ctx, "k", []byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1000 * time.Hour)
	if got, _ := m.Limits(ctx, "k"); string(got) != "two" {
		t.Errorf("ttl 0, 1000 h later: %q, want two", got)
	}
	if got, err := m.Limits(ctx, "other"); got != nil || err != nil {
		t.Errorf("a key never put: %q, %v; want nil, nil", got, err)
	}
	if err := m.PutLimits(ctx, "k", []byte("x"), -time.Second); err == nil {
		t.Error("a negative ttl was accepted")
	}
	m.Close()
	if err := m.PutLimits(ctx, "k", nil, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("PutLimits after Close: %v, want ErrClosed", err)
	}
	if _, err := m.Limits(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("Limits after Close: %v, want ErrClosed", err)
	}
}

// TestMemoryLimitsBounded: past maxLimits values, PutLimits drops others rather than grow.
func TestMemoryLimitsBounded(t *testing.T) {
	m, err := NewMemory(MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := range maxLimits + 10 {
		if err := m.PutLimits(context.Background(), strconv.Itoa(i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.limits.m); n != maxLimits {
		t.Errorf("%d values kept, want %d", n, maxLimits)
	}
}
