package sqlitestore

import (
	"context"
	"database/sql"
	"encoding"
	"fmt"
	"time"

	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// tx runs fn in a write transaction (BEGIN IMMEDIATE, from the DSN's _txlock), committing when
// fn returns nil.
func (st *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("ratemonitor: sqlite store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ratemonitor: sqlite store: commit: %w", err)
	}
	return nil
}

// load reads and decodes key's counters, one per slot; a slot with no row gets an empty
// counter.
func (st *Store) load(ctx context.Context, q querier, s *engine.Strategy, key string) ([]engine.Counter, error) {
	cs := s.NewCounters()
	rows, err := q.QueryContext(ctx, `SELECT counter, state FROM rate_limit_state WHERE key = ?`, key)
	if err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var state []byte
		if err := rows.Scan(&id, &state); err != nil {
			return nil, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
		}
		for j := range cs {
			if s.CounterID(j) != id {
				continue
			}
			if err := cs[j].(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
				// UnmarshalBinary left cs[j] empty; see Store.
				st.report(fmt.Errorf("ratemonitor: sqlite store: key %q, counter %s: discarded a state that does not decode: %w", key, id, err))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ratemonitor: sqlite store: read key %q: %w", key, err)
	}
	return cs, nil
}

// inTx applies fn to key's counters in one write transaction, with the instant read once the
// write lock is held and the counters rebased on it (engine.Rebase), and writes back every
// counter (deleting those in which nothing counts).
func (st *Store) inTx(ctx context.Context, s *engine.Strategy, key string, fn func([]engine.Counter, time.Time)) error {
	return st.tx(ctx, func(tx *sql.Tx) error {
		cs, err := st.load(ctx, tx, s, key)
		if err != nil {
			return err
		}
		now := st.clock.Now()
		engine.Rebase(cs, nil, now) // a wall clock stepped back: see engine.StepTolerance
		fn(cs, now)
		for j, c := range cs {
			exp := c.Expiry()
			if exp.IsZero() {
				if _, err := tx.ExecContext(ctx, `DELETE FROM rate_limit_state WHERE key = ? AND counter = ?`, key, s.CounterID(j)); err != nil {
					return fmt.Errorf("ratemonitor: sqlite store: write key %q: %w", key, err)
				}
				continue
			}
			state, _ := c.(encoding.BinaryMarshaler).MarshalBinary()
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO rate_limit_state (key, counter, state, expires_at) VALUES (?, ?, ?, ?)
				 ON CONFLICT(key, counter) DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at`,
				key, s.CounterID(j), state, exp.UnixNano()); err != nil {
				return fmt.Errorf("ratemonitor: sqlite store: write key %q: %w", key, err)
			}
		}
		return nil
	})
}
