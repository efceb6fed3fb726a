package redisstore_test

import (
	"log"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/middleware"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// A fleet of processes pacing one Xero app shares its counts in Redis: every process makes
// one client like this at start-up. The Redis client needs MaxRetries: -1 (a lost reply must
// not replay a script that may have counted) and ContextTimeoutEnabled (so that the store's
// Timeout bounds each call); New refuses a client without them.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	defer client.Close() // the store never closes the client

	store, err := redisstore.New(client, redisstore.Options{
		Prefix:  "myapp", // keys myapp:…; the default is "ratemonitor"
		Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	tr, err := ratemonitor.New(http.DefaultTransport,
		append(profiles.Xero("xero-app:"+os.Getenv("XERO_CLIENT_ID")).Options(), ratemonitor.WithStore(store))...)
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	xero := &http.Client{Transport: tr} // share it: every request of the process goes through it
	resp, err := xero.Get("https://api.xero.com/connections")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// A Redis Cluster (or Sentinel, or Ring) client works the same way: each key's counters
// live on one node, so an operation is one script on one node.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"redis-0:6379", "redis-1:6379", "redis-2:6379"},
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	tr, err := ratemonitor.New(http.DefaultTransport, append(profiles.GitHubREST().Options(), ratemonitor.WithStore(store))...)
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	github := &http.Client{Transport: tr}
	req, err := http.NewRequest(http.MethodGet, "https://api.github.com/user", nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("GITHUB_TOKEN"))
	resp, err := github.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// The servers of a fleet limit their clients together with the middleware over Redis: a
// token bucket of 20 a client, refilled at 5 a second. A server that cannot reach Redis
// answers 503 (Reject, the default), so the limit does not vanish silently.
func ExampleNew_middleware() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapi"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	rule, err := tokenbucket.Rule(20, 5)
	if err != nil {
		log.Fatal(err)
	}
	s, err := tokenbucket.New(rule)
	if err != nil {
		log.Fatal(err)
	}
	l, err := middleware.New(store, s, middleware.WithKeyHeader("X-Api-Key")) // a credential: hashed
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello\n")) })
	log.Fatal(http.ListenAndServe(":8080", l.Wrap(mux)))
}
