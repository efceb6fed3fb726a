package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
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

func rows(s *engine.Strategy, key string, at time.Time) []row {
	rs := make([]row, s.Slots())
	for j := range rs {
		w := s.SlotRule(j).EffectiveWindow()
		start := fixedcount.WindowStart(at, w)
		rs[j] = row{key: strconv.FormatInt(int64(w/time.Second), 10) + "s|" + key, start: start, end: start.Add(w)}
	}
	return rs
}

// upsertSQL is the single statement that counts n attempts in every slot's current window, and
// returns each row's window and count after it. The current window is the later of the one that
// holds now and the slot's latest row: a clock read just behind another writer's (within
// engine.StepTolerance, or a step back not yet rebased) counts in the key's latest window,
// never in one that has already ended there (docs/rules.md#window-semantics). Arguments per slot: key, the start
// of the window that holds now, key again, n.
func upsertSQL(slots int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO rate_limit_windows (key, window_start, count) VALUES ")
	for j := range slots {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, max(?, coalesce((SELECT window_start FROM rate_limit_windows WHERE key = ? ORDER BY window_start DESC LIMIT 1), '')), ?)")
	}
	b.WriteString(" ON CONFLICT(key, window_start) DO UPDATE SET count = count + excluded.count RETURNING key, window_start, count")
	return b.String()
}

// upsertArgs returns upsertSQL's arguments for n attempts at now.
func upsertArgs(rs []row, n int) []any {
	args := make([]any, 0, 4*len(rs))
	for _, r := range rs {
		args = append(args, r.key, r.start.Format(isoSecond), r.key, n)
	}
	return args
}

// window is a slot's row as read: its window start and count.
type window struct {
	start time.Time
	count int64
}

// stepped reports whether a slot's latest window starts more than engine.StepTolerance after
// now: the key has seen an instant at least that far ahead, so the clock was stepped back.
func stepped(w window, now time.Time) bool { return w.start.Sub(now) > engine.StepTolerance }

// fixedAdd counts n attempts at now in every slot's current window with one upsert, and returns
// one counter per slot holding the count after it. When the upsert finds the key's windows
// ahead of now by more than the tolerance (the clock was stepped back), the key is rebased
// (fixedRebase) and the counters are read again.
func (st *Store) fixedAdd(ctx context.Context, s *engine.Strategy, key string, n int, now time.Time) ([]engine.Counter, error) {
	rs := rows(s, key, now)
	res, err := st.db.QueryContext(ctx, upsertSQL(len(rs)), upsertArgs(rs, n)...)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
	}
	got, err := scanWindows(res)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
	}
	for _, r := range rs {
		if w, ok := got[r.key]; ok && stepped(w, now) {
			// Rare: the attempts are counted (in the latest window); now carry them over.
			var cs []engine.Counter
			err := st.tx(ctx, func(tx *sql.Tx) error {
				if err := fixedRebase(ctx, tx, s, key, now); err != nil {
					return err
				}
				cs, _, _, err = fixedLoad(ctx, tx, s, key, now)
				return err
			})
			return cs, err
		}
	}
	return counters(s, rs, got, now), nil
}

// fixedRebase carries, for every slot whose latest window starts more than the tolerance after
// now (stepped), that window's count into the window that holds now, replacing what that row
// held, and deletes the slot's rows after it (they are from before the step): the key's
// latest window becomes the clock's current one, with its count, so no fresh limit is
// admitted and no caller waits until the clock catches up. Run it in a write transaction.
func fixedRebase(ctx context.Context, q querier, s *engine.Strategy, key string, now time.Time) error {
	for _, r := range rows(s, key, now) {
		res, err := q.QueryContext(ctx, `SELECT key, window_start, count FROM rate_limit_windows WHERE key = ? ORDER BY window_start DESC LIMIT 1`, r.key)
		if err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
		}
		got, err := scanWindows(res)
		if err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
		}
		w, ok := got[r.key]
		if !ok || !stepped(w, now) {
			continue
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM rate_limit_windows WHERE key = ? AND window_start >= ?`, r.key, r.start.Format(isoSecond)); err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: rebase key %q: %w", key, err)
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO rate_limit_windows (key, window_start, count) VALUES (?, ?, ?)`,
			r.key, r.start.Format(isoSecond), w.count); err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: rebase key %q: %w", key, err)
		}
	}
	return nil
}

// fixedLoad reads every slot's count in its current window: the later of the one that holds
// now and the slot's latest row. A latest row that is stepped (not yet rebased, when read
// outside a write) is answered as fixedRebase will store it: its count in the window that
// holds now; rebase reports whether one was. It also returns each slot's current window start.
func fixedLoad(ctx context.Context, q querier, s *engine.Strategy, key string, now time.Time) (cs []engine.Counter, starts []time.Time, rebase bool, err error) {
	rs := rows(s, key, now)
	var b strings.Builder
	args := make([]any, 0, 2*len(rs))
	b.WriteString("SELECT key, window_start, count FROM rate_limit_windows WHERE ")
	for j, r := range rs {
		if j > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(key = ? AND window_start >= ?)")
		args = append(args, r.key, r.start.Format(isoSecond))
	}
	b.WriteString(" ORDER BY window_start")
	res, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, nil, false, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	got, err := scanWindows(res) // ordered: the latest row of each slot wins
	if err != nil {
		return nil, nil, false, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	starts = make([]time.Time, len(rs))
	for j, r := range rs {
		starts[j] = r.start
		if w, ok := got[r.key]; ok {
			if stepped(w, now) {
				rebase = true
				w.start = r.start
				got[r.key] = w
			}
			starts[j] = w.start
		}
	}
	return counters(s, rs, got, now), starts, rebase, nil
}

// scanWindows reads rows of (key, window_start, count), the last row of each key winning.
func scanWindows(res *sql.Rows) (map[string]window, error) {
	defer res.Close()
	got := map[string]window{}
	for res.Next() {
		var k, start string
		var c int64
		if err := res.Scan(&k, &start, &c); err != nil {
			return nil, err
		}
		t, err := time.Parse(isoSecond, start)
		if err != nil {
			return nil, fmt.Errorf("window_start %q of row %q is not %s: delete the row", start, k, isoSecond)
		}
		got[k] = window{start: t, count: c}
	}
	return got, res.Err()
}

// counters turns windows read from the table into fixed-window counters at now, so that the
// strategy's own rules answer for them; a slot without a row is empty.
func counters(s *engine.Strategy, rs []row, got map[string]window, now time.Time) []engine.Counter {
	cs := make([]engine.Counter, len(rs))
	for j, r := range rs {
		c := fixedcount.NewCounter(s.SlotRule(j).EffectiveWindow())
		w, ok := got[r.key]
		if !ok {
			w.start = r.start
		}
		// A window ahead of now (within the tolerance) is kept as it is: the counter answers
		// from now, so its waits run to that window's end on this clock.
		c.SetState(w.start, w.count, now)
		cs[j] = c
	}
	return cs
}

// fixedAdmit is the middleware's operation: count first, then compare.
func (st *Store) fixedAdmit(ctx context.Context, s *engine.Strategy, key string, n int) (strategy.Decision, error) {
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

// fixedReserve counts n only if they fit every rule, in one write transaction, after rebasing
// a key whose clock was stepped back (fixedRebase). Result.At is now: a Release of it finds
// the windows that hold now, so slots counted in a window ahead of now (within the tolerance)
// are not given back, only held until that window ends.
func (st *Store) fixedReserve(ctx context.Context, s *engine.Strategy, key string, n int) (res engine.Result, err error) {
	err = st.tx(ctx, func(tx *sql.Tx) error {
		now := st.clock.Now()
		if err := fixedRebase(ctx, tx, s, key, now); err != nil {
			return err
		}
		cs, starts, _, err := fixedLoad(ctx, tx, s, key, now)
		if err != nil {
			return err
		}
		if res.Wait = s.Wait(cs, now, n); res.Wait > 0 {
			return nil
		}
		var b strings.Builder
		args := make([]any, 0, 3*len(starts))
		b.WriteString("INSERT INTO rate_limit_windows (key, window_start, count) VALUES ")
		for j, r := range rows(s, key, now) {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?)")
			args = append(args, r.key, starts[j].Format(isoSecond), n)
		}
		b.WriteString(" ON CONFLICT(key, window_start) DO UPDATE SET count = count + excluded.count")
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return fmt.Errorf("ratemonitor: sqlite store: count key %q: %w", key, err)
		}
		res.Allowed, res.At = true, now
		return nil
	})
	return res, err
}

// fixedRelease takes back up to n attempts from the windows that hold at.
func (st *Store) fixedRelease(ctx context.Context, s *engine.Strategy, key string, at time.Time, n int) error {
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
