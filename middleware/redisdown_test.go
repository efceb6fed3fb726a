package middleware

import (
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
)

func TestRedisDown(t *testing.T) {
	port := 26379
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(300 * time.Millisecond)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	st, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := must(rollingwindow.New(strategy.Rule{Limit: 2, Window: time.Minute}))
	lim, err := New(st, s)
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Wrap(&counting{})
	codes := []int{}
	for range 3 {
		codes = append(codes, serve(h, "/", "1.2.3.4:1", nil).Code)
	}
	cmd.Process.Kill()
	cmd.Wait()
	t0 := time.Now()
	w := serve(h, "/", "1.2.3.4:1", nil)
	codes = append(codes, w.Code)
	t.Logf("codes %v, down answer after %v, Retry-After %q", codes, time.Since(t0), w.Header().Get("Retry-After"))
	if codes[0] != 200 || codes[2] != 429 || w.Code != 503 {
		t.Errorf("codes %v", codes)
	}
}
