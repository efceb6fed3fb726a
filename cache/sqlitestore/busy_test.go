package sqlitestore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// TestBusyReturnsAtContextEnd: another process holds the write lock. A request whose context
// ends after 200 ms returns soon after, not after the whole busy timeout (30 s) while holding the
// process's only connection. "Soon" is within 10 s: far below the busy timeout, and 50 times the
// 200 ms it takes on an idle machine, so that a loaded one passes too.
func TestBusyReturnsAtContextEnd(t *testing.T) {
	st, path := open(t, Options{BusyTimeout: 30 * time.Second})
	other, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, s := range []*engine.Strategy{
		must(fixedwindow.New(strategy.Rule{Limit: 10, Window: time.Minute})),
		must(rollingwindow.New(strategy.Rule{Limit: 10, Window: time.Minute})),
	} {
		t.Run(s.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			t0 := time.Now()
			_, err := st.Admit(ctx, s, "k", 1)
			cancel()
			took := time.Since(t0)
			t.Logf("%s: %v after %v", s.Name(), err, took)
			if took > 10*time.Second {
				t.Errorf("%s: a 200 ms context held the only connection for %v", s.Name(), took)
			}
		})
	}
}
