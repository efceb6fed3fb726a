package sqlitestore

import (
	"context"
	"math/rand"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestCancelErrorKinds(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk, PruneEvery: -1})
	s := must(rollingwindow.New(strategy.Rule{Limit: 100000, Window: time.Hour}))
	var mu sync.Mutex
	kinds := map[string]int{}
	re := regexp.MustCompile(`"[^"]*"`)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Intn(2000))*time.Microsecond)
				_, err := st.Admit(ctx, s, "k", 1)
				cancel()
				k := "ok"
				if err != nil {
					k = re.ReplaceAllString(err.Error(), "K")
				}
				mu.Lock()
				kinds[k]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for k, n := range kinds {
		t.Logf("%5d %s", n, k)
	}
	d, err := st.Admit(context.Background(), s, "k", 1)
	t.Logf("after: %+v %v", d.Allowed, err)
}
