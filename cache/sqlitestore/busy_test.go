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

// Another process holds the write lock. A request whose context ends after 200 ms must
// return soon after, not wait the whole busy timeout while holding the process's only
// connection.
func TestBusyHonoursContext(t *testing.T) {
	st, path := open(t, Options{BusyTimeout: 5 * time.Second})
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
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		t0 := time.Now()
		_, err := st.Admit(ctx, s, "k", 1)
		cancel()
		took := time.Since(t0)
		t.Logf("%s: %v after %v", s.Name(), err, took)
		if took > time.Second {
			t.Errorf("%s: a 200 ms context held the only connection for %v", s.Name(), took)
		}
	}
}
