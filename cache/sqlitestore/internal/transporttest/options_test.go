package transporttest

import (
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/sqlitestore"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

var minute = strategy.Rule{Limit: 60, Window: time.Minute}

// TestInFlightRefusesSQLite: the SQLite store holds no in-flight leases, so New with
// WithInFlight over it fails with an error naming the option, the store's type and the stores
// that do hold leases (moved from the core's TestInFlightOptionsRefusedNamingTheOption, which keeps the same check
// against a memory store stripped of cache.Leaser).
func TestInFlightRefusesSQLite(t *testing.T) {
	sq := openSQLite(t, sqlitestore.Options{})
	want := "ratemonitor: WithInFlight(5): the store (*sqlitestore.Store) holds no in-flight leases (cache.Leaser); use the memory store (cache.Memory) or the Redis store (redisstore)"
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(minute), ratemonitor.WithStore(sq), ratemonitor.WithInFlight(5))
	if err == nil {
		tr.Close()
	}
	if err == nil || err.Error() != want {
		t.Errorf("New over SQLite: %v, want %q", err, want)
	}
}

// TestNewErrorNamesWithStoreSQLite: a fixed window with a 500 ms margin is one SQLite cannot
// hold (its Validate refuses it), and New's error says so starting with "ratemonitor:
// WithStore" then ':' or '(', saying "ratemonitor: " once, as New's doc promises (moved from
// the core's TestNewErrorsNameTheOption, which keeps the WithStore case against a store whose
// Validate refuses).
func TestNewErrorNamesWithStoreSQLite(t *testing.T) {
	sq := openSQLite(t, sqlitestore.Options{})
	fixedHalf, err := fixedwindow.New(strategy.Rule{Limit: 60, Window: time.Minute, Margin: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := ratemonitor.New(nil, ratemonitor.WithStrategy(fixedHalf), ratemonitor.WithStore(sq))
	if err == nil {
		tr.Close()
		t.Fatal("New succeeded, want an error")
	}
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "ratemonitor: WithStore")
	if !ok || rest == "" || (rest[0] != ':' && rest[0] != '(') || strings.Contains(rest, "ratemonitor: ") {
		t.Errorf("error %q, want it to start with %q then ':' or '(' (and say ratemonitor once)", msg, "ratemonitor: WithStore")
	}
	// The whole message too: it names the rule and what SQLite needs.
	if want := "ratemonitor: WithStore: sqlite store: rule 60/1m0s (margin 500ms): a fixed window here must be whole seconds, got 1m0.5s"; msg != want {
		t.Errorf("error %q, want %q", msg, want)
	}
}
