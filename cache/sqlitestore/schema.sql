-- Fixed windows: one row per key, rule window and aligned window start, incremented by a
-- single upsert. The key column is "<window seconds>s|<key>", e.g. "60s|client-a", so that
-- rules of different windows on one key never share a row and PruneExpired can read the
-- window length back (CAST(key AS INTEGER) reads the leading number).
CREATE TABLE IF NOT EXISTS rate_limit_windows (
	key TEXT NOT NULL,
	window_start TEXT NOT NULL, -- ISO 8601 UTC, e.g. 2026-11-30T20:15:00Z
	count INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (key, window_start)
);

-- Rolling-window logs and token buckets: one encoded counter per key and counter ID, read and
-- written in one transaction. expires_at (Unix nanoseconds) is when nothing in it counts.
CREATE TABLE IF NOT EXISTS rate_limit_state (
	key TEXT NOT NULL,
	counter TEXT NOT NULL,
	state BLOB NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (key, counter)
);

-- What PruneExpired searches by: when a window may go (start + two window lengths), and when a
-- state stops counting. Without them every prune scans both tables.
CREATE INDEX IF NOT EXISTS rate_limit_windows_prune ON rate_limit_windows (unixepoch(window_start) + 2 * CAST(key AS INTEGER));
CREATE INDEX IF NOT EXISTS rate_limit_state_expires ON rate_limit_state (expires_at);
