package docs

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func sharedClient(rules ...strategy.Rule) (*http.Client, func(), error) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379",
		MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1}) // required, see below
	store, err := redisstore.New(rc, redisstore.Options{})
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	tr, err := ratemonitor.New(nil, ratemonitor.WithRules(rules...), ratemonitor.WithStore(store), ratemonitor.WithPacing())
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return &http.Client{Transport: tr}, func() { tr.Close(); store.Close(); rc.Close() }, nil
}

func clusterAndSentinel() (redis.UniversalClient, redis.UniversalClient) {
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"},
		ContextTimeoutEnabled: true, DialerRetries: 1}) // MaxRetries: -1 is the Cluster client's default
	sc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "ratemonitor",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		MaxRetries:    -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	return rc, sc
}
