package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestOddKeysCountApart: keys with NUL, '|', invalid UTF-8, very long: each is counted on its
// own and exactly, under each strategy.
func TestOddKeysCountApart(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk})
	strats := map[string]*engine.Strategy{
		"fixed":   must(fixedwindow.New(strategy.Rule{Limit: 3, Window: time.Minute})),
		"rolling": must(rollingwindow.New(strategy.Rule{Limit: 3, Window: time.Minute})),
		"bucket":  must(tokenbucket.New(strategy.Rule{Limit: 3, Window: time.Minute})),
	}
	long := make([]byte, 100_000)
	for i := range long {
		long[i] = 'a'
	}
	keys := []string{"", "a\x00b", "a\x00c", "a", "\x00", "60s|x", "x|y", "\xff\xfe", "ключ", string(long), string(long) + "b"}
	for name, s := range strats {
		t.Run(name, func(t *testing.T) {
			for _, k := range keys {
				allowed := 0
				for range 5 {
					d, err := st.Admit(context.Background(), s, k, 1)
					if err != nil {
						t.Fatalf("%s key %q: %v", name, k[:min(len(k), 10)], err)
					}
					if d.Allowed {
						allowed++
					}
				}
				if allowed != 3 {
					t.Errorf("%s key %q: %d of 5 admitted, want 3", name, k[:min(len(k), 10)], allowed)
				}
			}
		})
	}
}
