package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestCorruptStateIsReplaced: a corrupt encoded state whose expires_at is the end of time does
// not make the key fail for ever.
func TestCorruptStateIsReplaced(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	st, _ := open(t, Options{Clock: clk})
	s := must(tokenbucket.New(strategy.Rule{Limit: 3, Window: time.Minute}))
	if _, err := st.Admit(context.Background(), s, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().Exec(`UPDATE rate_limit_state SET state = x'0102', expires_at = 9223372036854775807`); err != nil {
		t.Fatal(err)
	}
	clk.Advance(24 * time.Hour)
	if _, err := st.PruneExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := st.Admit(context.Background(), s, "k", 1)
	t.Logf("a day later: %v", err)
	if err != nil {
		t.Errorf("corrupt row bricks key forever: %v", err)
	}
}
