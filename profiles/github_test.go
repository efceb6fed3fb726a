package profiles_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/standin"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// ghOnce sends one request of the token ghp_test to an upstream that answers with status, body
// and header fields.
func ghOnce(t *testing.T, tr *ratemonitor.Transport, status int, body string, fields ...string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(fields); i += 2 {
			w.Header().Set(fields[i], fields[i+1])
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	resp, err := tr.RoundTrip(request(srv.URL, "Authorization", "Bearer ghp_test"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// ghWait is tr's wait for one more request of the token ghOnce sends with.
func ghWait(t *testing.T, tr *ratemonitor.Transport) time.Duration {
	t.Helper()
	key := tr.Key(request("http://api.github.test/", "Authorization", "Bearer ghp_test"))
	w, err := tr.WaitTime(context.Background(), key, 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGitHubSecondaryMessage403PausesAMinute: a 403 whose only sign of a secondary rate limit is
// its JSON message pauses the token at least a minute (GitHub: "wait for at least one minute").
func TestGitHubSecondaryMessage403PausesAMinute(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusForbidden,
		`{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4990", "x-ratelimit-used", "10",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(time.Hour).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, tr); w < time.Minute {
		t.Errorf("after a secondary-limit 403 without retry-after, the token may send again in %v, want at least 1m0s", w)
	}
}

// TestGitHubOtherResourceNotRead: a search response with the search resource used up
// (x-ratelimit-resource: search) does not hold core requests of the token.
func TestGitHubOtherResourceNotRead(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusOK, `{"total_count":0,"items":[]}`,
		"x-ratelimit-limit", "30", "x-ratelimit-remaining", "0", "x-ratelimit-used", "30",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(time.Minute).Unix(), 10), "x-ratelimit-resource", "search")
	if w := ghWait(t, tr); w != 0 {
		t.Errorf("after a search response with the search resource used up, a core request of the token waits %v, want 0 (core has 4999 left)", w)
	}
}

// TestGitHubRESTAndGraphQLCountApart: over one store, the REST limit used up does not hold GraphQL
// queries of the token: their keys differ.
func TestGitHubRESTAndGraphQLCountApart(t *testing.T) {
	clk := clock.NewManual(t0)
	store, err := cache.NewMemory(cache.MemoryConfig{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rest, err := ratemonitor.New(nil, append(profiles.GitHubREST().Options(), ratemonitor.WithStore(store))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	gql, err := ratemonitor.New(nil, append(profiles.GitHubGraphQL(nil).Options(), ratemonitor.WithStore(store))...)
	if err != nil {
		t.Fatal(err)
	}
	defer gql.Close()
	ghOnce(t, rest, http.StatusOK, `{}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "0", "x-ratelimit-used", "5000",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(30*time.Minute).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, gql); w != 0 {
		t.Errorf("the REST limit used up makes a GraphQL query of the token wait %v, want 0 (GraphQL points are a separate limit)", w)
	}
}

// TestGitHubFarResetCutToAnHour: a reset 10 days away (garbled) holds the token at most an hour
// and a minute.
func TestGitHubFarResetCutToAnHour(t *testing.T) {
	clk := clock.NewManual(t0)
	tr, err := ratemonitor.New(nil, append(profiles.GitHubREST().Options(), ratemonitor.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ghOnce(t, tr, http.StatusForbidden, `{"message":"API rate limit exceeded"}`,
		"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "0",
		"x-ratelimit-reset", strconv.FormatInt(t0.Add(10*24*time.Hour).Unix(), 10), "x-ratelimit-resource", "core")
	if w := ghWait(t, tr); w > time.Hour+time.Minute {
		t.Errorf("a reset 10 days away pauses the token %v, want at most GitHub's hour", w)
	}
}

// TestGitHubJustPassedResetPausesUntilIt: a 403 with x-ratelimit-remaining 0 whose reset has
// just passed by our clock pauses the token until GitHub's clock reaches it (measured from the
// response's Date), or a second (the field's resolution) when GitHub's clock is past it too;
// never the fallback minute, which would idle a token GitHub has already refilled.
func TestGitHubJustPassedResetPausesUntilIt(t *testing.T) {
	for _, c := range []struct {
		name string
		date time.Time // the response's Date: GitHub's clock
		want time.Duration
	}{
		{"GitHub's clock 3 s behind ours", t0.Add(-3 * time.Second), 2 * time.Second},
		{"GitHub's clock with ours", t0, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			tr, err := ratemonitor.New(nil, append(profiles.GitHubREST().Options(), ratemonitor.WithClock(clk))...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			ghOnce(t, tr, http.StatusForbidden, `{"message":"API rate limit exceeded for user ID 1."}`,
				"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "0", "x-ratelimit-used", "5000",
				"x-ratelimit-reset", strconv.FormatInt(t0.Add(-time.Second).Unix(), 10), "x-ratelimit-resource", "core",
				"Date", c.date.UTC().Format(http.TimeFormat))
			if w := ghWait(t, tr); w != c.want {
				t.Errorf("a 403 whose reset passed 1 s ago pauses the token %v, want %v", w, c.want)
			}
		})
	}
}

// TestGitHubRESTSharedTokenWaitsForReset: another client has used 4990 of the token's hour; the
// first answer's X-RateLimit-Remaining (9) raises the count, so the next 9 go and the rest wait for
// X-RateLimit-Reset: GitHub refuses none.
func TestGitHubRESTSharedTokenWaitsForReset(t *testing.T) {
	s, _ := drive(t, profiles.GitHubREST().Options(), func(now func() time.Time) standIn {
		gh := standin.NewGitHub(now)
		gh.Use("Bearer ghp_test", 4990)
		return gh
	}, 40, func(i int, url string) *http.Request { return request(url, "Authorization", "Bearer ghp_test") })
	if n, first, last := s.Accepted(); s.Refused() != 0 || n != 40 || last.Sub(first) < time.Hour-time.Second {
		t.Fatalf("%d accepted from %v to %v, %d refused; want 40, the 11th after the reset, none refused", n, first, last, s.Refused())
	}
}
