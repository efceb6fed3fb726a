package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// forEachMaster calls fn for each server that holds the store's keys: every master of a
// ClusterClient (go-redis ForEachMaster, concurrently, after loading the slot map), every
// shard of a Ring (ForEachShard, concurrently), or the client itself, which for a Sentinel
// FailoverClient sends each command to the current master. A client of another kind has no
// server the store can name: fn is not called.
func forEachMaster(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return nil
}

// failoverAddr is the Addr go-redis gives a Sentinel FailoverClient's options (sentinel.go,
// NewFailoverClient): the master's address is not in the options, so it is asked of the
// server (CLIENT INFO's laddr, the address the connection reached).
const failoverAddr = "FailoverClient"

// addrOf names the server c reached: its configured address, or for a FailoverClient the
// laddr of CLIENT INFO run in the same pipeline (nil when not asked or refused).
func addrOf(c *redis.Client, ci *redis.ClientInfoCmd) string {
	if a := c.Options().Addr; a != failoverAddr {
		return a
	}
	if ci != nil && ci.Err() == nil && ci.Val() != nil && ci.Val().LAddr != "" {
		return ci.Val().LAddr
	}
	return "the Sentinel master (CLIENT INFO refused, address unknown)"
}

// clientInfo queues CLIENT INFO on p when c is a FailoverClient (see addrOf), else nil.
func clientInfo(ctx context.Context, c *redis.Client, p redis.Pipeliner) *redis.ClientInfoCmd {
	if c.Options().Addr != failoverAddr {
		return nil
	}
	return p.ClientInfo(ctx)
}

// refused reports whether err is the server's answer (an error reply such as "ERR unknown
// command" or NOPERM: go-redis's redis.Error), not a failure to reach it.
func refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// infoFields parses the "field:value" lines of INFO replies.
func infoFields(replies ...string) map[string]string {
	f := make(map[string]string)
	for _, r := range replies {
		for line := range strings.SplitSeq(r, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
				f[k] = v
			}
		}
	}
	return f
}

// intField returns field k of f as an integer, or -1 when absent or not one.
func intField(f map[string]string, k string) int64 {
	n, err := strconv.ParseInt(f[k], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
