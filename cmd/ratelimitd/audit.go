package main

import (
	"context"
	"net/http"
	"time"
)

// auditSchema is the api_calls table: one row per admitted call.
const auditSchema = `CREATE TABLE IF NOT EXISTS api_calls (
	id INTEGER PRIMARY KEY,
	key TEXT NOT NULL,
	method TEXT NOT NULL,
	path TEXT NOT NULL,
	called_at TEXT NOT NULL -- ISO 8601 UTC, to the microsecond
)`

// record writes one admitted call to api_calls.
func (srv *server) record(ctx context.Context, key string, r *http.Request) error {
	_, err := srv.audit.ExecContext(ctx, `INSERT INTO api_calls (key, method, path, called_at) VALUES (?, ?, ?, ?)`,
		key, r.Method, r.URL.Path, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
	return err
}
