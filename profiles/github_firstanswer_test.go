package profiles_test

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// TestGitHubFirstAnswerBeforeTheRush: another client has used 4950 of a token's 5000 an hour
// (standin.GitHub, written from GitHub's "Rate limits for the REST API"), so 50 are left, and
// this process knows nothing of the token. 20 goroutines send 3 requests each through
// profiles.GitHubREST. Exactly 1 request goes out before the first answer is read (the others
// wait for it: SyncConfig.FirstAnswer's default), its x-ratelimit-remaining (49) raises the
// count, the next 49 go within the hour and the last 10 after x-ratelimit-reset: 0 × 403, 60
// accepted. With the gate off (FirstAnswer -1) the figures of the rush are logged.
func TestGitHubFirstAnswerBeforeTheRush(t *testing.T) {
	for _, c := range []struct {
		name string
		gate int
	}{{"gate", 0}, {"no gate", -1}} {
		t.Run(c.name, func(t *testing.T) {
			gh, before := githubRush(t, c.gate)
			n, first, last := gh.Accepted()
			t.Logf("%d sent before the first answer; %d accepted from %v to %v, %d refused (403)", before, n, first.Sub(t0), last.Sub(t0), gh.Refused())
			if c.gate < 0 {
				return // the rush today: a figure to log, not to assert (it depends on the scheduler)
			}
			if before != 1 || gh.Refused() != 0 || n != 60 || last.Sub(first) < time.Hour-time.Second {
				t.Fatalf("%d sent before the first answer, %d refused, %d accepted from %v to %v; want 1, 0, 60 and the last 10 after the reset an hour on",
					before, gh.Refused(), n, first.Sub(t0), last.Sub(t0))
			}
		})
	}
}

// githubRush runs the 20 goroutines of TestGitHubFirstAnswerBeforeTheRush, and returns the
// stand-in and how many requests reached it before the first answer came back. No answer comes
// back until every goroutine has called RoundTrip, and 20 ms of real time more, so that the
// others are there to rush (a Transport without the gate sends them meanwhile).
func githubRush(t *testing.T, gate int) (*standin.GitHub, int64) {
	const token, goroutines, each = "Bearer ghp_test", 20, 3
	clk := clock.NewManual(t0)
	clk.Auto = true
	gh := standin.NewGitHub(clk.Now)
	gh.Use(token, 5000-50)
	var started, sent, before atomic.Int64
	var once sync.Once
	opened := make(chan struct{})
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if sent.Add(1) == 1 {
			for deadline := time.Now().Add(5 * time.Second); started.Load() < goroutines && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			close(opened)
		}
		<-opened // no answer before the hold ends
		resp, err := recorderTransport{gh}.RoundTrip(req)
		once.Do(func() { before.Store(sent.Load()) })
		return resp, err
	})
	p := profiles.GitHubREST()
	p.Sync.FirstAnswer = gate
	tr, err := ratemonitor.New(base, append(p.Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if i == 0 {
					started.Add(1)
				}
				resp, err := c.Do(request("http://api.github.test/user", "Authorization", token))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return gh, before.Load()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
