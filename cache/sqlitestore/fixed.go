package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// isoSecond is how window_start is written: ISO 8601 in UTC, to the second.
const isoSecond = "2006-01-02T15:04:05Z"

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// row is one slot's address in rate_limit_windows at an instant.
type row struct {
	key   string    // "<window seconds>s|<key>"
	start time.Time // aligned window start
	end   time.Time
}

func rows(s *strategy.Strategy, key string, at time.Time) []row {
	rs := make([]row, s.Slots())
	for j := range rs {
		w := s.SlotRule(j).EffectiveWindow()
		start := fixedwindow.WindowStart(at, w)
		rs[j] = row{key: strconv.FormatInt(int64(w/time.Second), 10) + "s|" + key, start: start, end: start.Add(w)}
	}
	return rs
}

// upsert is the single statement that counts n attempts in every slot's current window, and
// returns each row's count after it.
func upsertSQL(slots int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO rate_limit_windows (key, window_start, count) VALUES ")
	for j := range slots {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
	}
	b.WriteString(" ON CONFLICT(key, window_start) DO UPDATE SET count = count + excluded.count RETURNING key, count")
	return b.String()
}

// fixedAdd counts n attempts at now in every slot's window with one upsert, and returns one
// counter per slot holding the count after it.
func (st *Store) fixedAdd(ctx context.Context, s *strategy.Strategy, key string, n int, now time.Time) ([]strategy.Counter, error) {
	rs := rows(s, key, now)
	args := make([]any, 0, 3*len(rs))
	for _, r := range rs {
		args = append(args, r.key, r.start.Format(isoSecond), n)
	}
	res, err := st.db.QueryContext(ctx, upsertSQL(len(rs)), args...)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
	}
	counts, err := scanCounts(res)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
	}
	return counters(s, rs, counts, now), nil
}

// fixedLoad reads every slot's count in the window that holds now.
func (st *Store) fixedLoad(ctx context.Context, q querier, s *strategy.Strategy, key string, now time.Time) ([]strategy.Counter, error) {
	rs := rows(s, key, now)
	var b strings.Builder
	args := make([]any, 0, 2*len(rs))
	b.WriteString("SELECT key, count FROM rate_limit_windows WHERE ")
	for j, r := range rs {
		if j > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(key = ? AND window_start = ?)")
		args = append(args, r.key, r.start.Format(isoSecond))
	}
	res, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	counts, err := scanCounts(res)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	return counters(s, rs, counts, now), nil
}

func scanCounts(res *sql.Rows) (map[string]int64, error) {
	defer res.Close()
	counts := map[string]int64{}
	for res.Next() {
		var k string
		var c int64
		if err := res.Scan(&k, &c); err != nil {
			return nil, err
		}
		counts[k] = c
	}
	return counts, res.Err()
}

// counters turns counts read from the table into fixed-window counters at now, so that the
// strategy's own rules answer for them.
func counters(s *strategy.Strategy, rs []row, counts map[string]int64, now time.Time) []strategy.Counter {
	cs := make([]strategy.Counter, len(rs))
	for j, r := range rs {
		c := fixedwindow.NewCounter(s.SlotRule(j).EffectiveWindow())
		c.SetState(r.start, counts[r.key], now)
		cs[j] = c
	}
	return cs
}

// fixedAdmit is the middleware's operation: count first, then compare.
func (st *Store) fixedAdmit(ctx context.Context, s *strategy.Strategy, key string, n int) (strategy.Decision, error) {
	now := st.clock.Now()
	cs, err := st.fixedAdd(ctx, s, key, n, now)
	if err != nil {
		return strategy.Decision{}, err
	}
	d := strategy.Decision{At: now, Rules: s.States(cs, now)}
	d.Allowed = true
	for _, r := range d.Rules {
		if r.Used > r.Rule.EffectiveLimit() {
			d.Allowed = false
		}
	}
	if !d.Allowed {
		// the refused attempt is counted: the next one waits for every rule it cannot fit
		for _, r := range d.Rules {
			if r.Used+n > r.Rule.EffectiveLimit() {
				d.RetryAfter = max(d.RetryAfter, r.Reset)
			}
		}
	}
	return d, nil
}

// fixedReserve counts n only if they fit every rule, in one write transaction.
func (st *Store) fixedReserve(ctx context.Context, s *strategy.Strategy, key string, n int) (res strategy.Result, err error) {
	err = st.tx(ctx, func(tx *sql.Tx) error {
		now := st.clock.Now()
		cs, err := st.fixedLoad(ctx, tx, s, key, now)
		if err != nil {
			return err
		}
		if res.Wait = s.Wait(cs, now, n); res.Wait > 0 {
			return nil
		}
		rs := rows(s, key, now)
		args := make([]any, 0, 3*len(rs))
		for _, r := range rs {
			args = append(args, r.key, r.start.Format(isoSecond), n)
		}
		q := strings.TrimSuffix(upsertSQL(len(rs)), " RETURNING key, count")
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
		}
		res.Allowed, res.At = true, now
		return nil
	})
	return res, err
}

// fixedRelease takes back up to n attempts from the windows that hold at.
func (st *Store) fixedRelease(ctx context.Context, s *strategy.Strategy, key string, at time.Time, n int) error {
	return st.tx(ctx, func(tx *sql.Tx) error {
		for _, r := range rows(s, key, at) {
			if _, err := tx.ExecContext(ctx,
				`UPDATE rate_limit_windows SET count = max(0, count - ?) WHERE key = ? AND window_start = ?`,
				n, r.key, r.start.Format(isoSecond)); err != nil {
				return fmt.Errorf("ratemonitor: sqlite store: release key %q: %w", key, err)
			}
		}
		return nil
	})
}
