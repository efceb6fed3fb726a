package redisstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache"
)

// limitsKey is the Redis key of key's limit value: in the hash slot of key's state.
func (st *Store) limitsKey(key string) string {
	return st.opts.Prefix + ":{k" + base64.RawURLEncoding.EncodeToString([]byte(key)) + "}:lim1"
}

// PutLimits implements cache.Syncer: a SET of v, with a TTL of ttl in whole ms rounded up
// (0: none), within Options.Timeout. A negative ttl is an error.
func (st *Store) PutLimits(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("ratemonitor: redis store: PutLimits of key %q: ttl %v is negative", key, ttl)
	}
	if st.closed.Load() {
		return st.failed(ctx, "put_limits", key, cache.ErrClosed)
	}
	ttl = (ttl + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	tctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	defer cancel()
	if err := st.client.Set(tctx, st.limitsKey(key), v, ttl).Err(); err != nil {
		return st.failed(ctx, "put_limits", key, fmt.Errorf("ratemonitor: redis store: PutLimits of key %q: %w", key, err))
	}
	return nil
}

// Limits implements cache.Syncer: a GET, within Options.Timeout; nil when the key is absent.
func (st *Store) Limits(ctx context.Context, key string) ([]byte, error) {
	if st.closed.Load() {
		return nil, st.failed(ctx, "limits", key, cache.ErrClosed)
	}
	tctx, cancel := context.WithTimeout(ctx, st.opts.Timeout)
	defer cancel()
	v, err := st.client.Get(tctx, st.limitsKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, st.failed(ctx, "limits", key, fmt.Errorf("ratemonitor: redis store: Limits of key %q: %w", key, err))
	}
	return v, nil
}
