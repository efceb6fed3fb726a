package profiles_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// TestProfileChangedByTheUser: a profile is a value a user reads and changes (a figure, a
// meter dropped or added) before passing it to New, which builds what was asked or says what
// is inconsistent (an option's error naming the profile; what New checks across options, such
// as a reader of a window no rule has, naming the reader); a changed value never changes
// another.
func TestProfileChangedByTheUser(t *testing.T) {
	req := request("https://api.github.com/user", "Authorization", "Bearer ghp_test")
	for _, c := range []struct {
		name       string
		change     func(p *profiles.Profile)
		wantErr    string
		wantRules  string
		wantPoints int // the points meter's limit; 0: no meter
	}{
		{"as made", func(*profiles.Profile) {}, "", "[5000/1h0m0s (margin 1s)]", 900},
		{"another plan and a scaled-down meter", func(p *profiles.Profile) {
			p.Rules[0].Limit = 1000
			points, _ := p.Meter("points")
			points.Rules[0].Limit /= 10
			if p.Meters[0].Rules[0].Limit != profiles.GitHubMinutePoints {
				t.Errorf("changing the copy Meter returned changed the profile: %v", p.Meters[0].Rules)
			}
			p.SetMeter(points)
		}, "", "[1000/1h0m0s (margin 1s)]", 90},
		{"the points meter alone", func(p *profiles.Profile) {
			points, _ := p.Meter("points")
			p.Meters = []ratemonitor.Meter{points}
		}, "", "[5000/1h0m0s (margin 1s)]", 900},
		{"the points meter dropped", func(p *profiles.Profile) { p.Meters = nil }, "", "[5000/1h0m0s (margin 1s)]", 0},
		{"a meter added", func(p *profiles.Profile) {
			p.SetMeter(ratemonitor.Meter{Name: "search", Rules: []strategy.Rule{{Limit: 30, Window: time.Minute}}})
		}, "", "[5000/1h0m0s (margin 1s)]", 900},
		{"a meter of a name taken", func(p *profiles.Profile) {
			p.Meters = append(p.Meters, p.Meters[0])
		}, `profiles.GitHubREST: ratemonitor: WithMeter("points"): a meter named "points" is already set`, "", 0},
		{"a rule that is not one", func(p *profiles.Profile) { p.Rules[0].Window = 0 }, "profiles.GitHubREST: ratemonitor: WithRules: invalid rule", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := profiles.GitHubREST()
			c.change(&p)
			tr, err := ratemonitor.New(nil, p.Options()...)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("New: %v, want an error saying %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if got := fmt.Sprint(tr.Rules()); got != c.wantRules {
				t.Errorf("rules %s, want %s", got, c.wantRules)
			}
			st, err := tr.Status(context.Background(), tr.Key(req))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.wantPoints == 0 && len(st.Meters) != 0:
				t.Errorf("meters %+v, want none", st.Meters)
			case c.wantPoints != 0 && (len(st.Meters) == 0 || st.Meters[0].Rules[0].Rule.Limit != c.wantPoints):
				t.Errorf("the points meter is %+v, want a limit of %d", st.Meters, c.wantPoints)
			}
		})
	}
	if p := profiles.GitHubREST(); p.Rules[0].Limit != profiles.GitHubHourLimit || p.Meters[0].Rules[0].Limit != profiles.GitHubMinutePoints {
		t.Errorf("a new GitHubREST has %d an hour and %d points, want %d and %d: a change leaked", p.Rules[0].Limit, p.Meters[0].Rules[0].Limit, profiles.GitHubHourLimit, profiles.GitHubMinutePoints)
	}
	x := profiles.Xero("xero-app:1")
	x.Rules = x.Rules[:1] // the day dropped, its reader kept
	_, err := ratemonitor.New(nil, x.Options()...)
	if want := "ratemonitor: WithSync: reader 0: headers.XeroReader(1m0s, 24h0m0s) (windows 1m0s, 24h0m0s, 1m0s (app, optional)) reads figures of the request's key's 24h0m0s window, and no rule has that window"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Xero without its day rule: %v, want an error saying %q", err, want)
	}
}

// TestGitHubProfileTakesAppRules: a user adds an app-wide limit to a GitHub profile with
// WithAppRules, a third meter beside points and content: a GET is charged on the token's hour,
// its points and the app, not on content; a POST on all four.
func TestGitHubProfileTakesAppRules(t *testing.T) {
	p := profiles.GitHubREST()
	ok := recorderTransport{http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	tr, err := ratemonitor.New(ok, append(p.Options(),
		ratemonitor.WithAppRules("github-app:1", strategy.Rule{Limit: 15000, Window: time.Hour}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	req := request("https://api.github.com/user", "Authorization", "Bearer ghp_test")
	key := tr.Key(req)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		r := req.Clone(ctx)
		r.Method = method
		resp, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, m := range []struct {
		meter string
		used  int
	}{{"points", 1 + 5}, {"content", 1}, {"app", 2}} {
		if u, err := tr.Meter(m.meter).AllocationUsed(ctx, key); err != nil || u[0].Used != m.used {
			t.Errorf("Meter(%q).AllocationUsed: %+v, %v; want %d used", m.meter, u, err, m.used)
		}
	}
	if k, ok := tr.AppKey(); !ok || k != "github-app:1" {
		t.Errorf("AppKey() = %q, %v; want github-app:1", k, ok)
	}
	st, err := tr.Status(ctx, key)
	if err != nil || len(st.Meters) != 3 || st.Meters[0].Meter != "points" || st.Meters[1].Meter != "content" || st.Meters[2].Meter != "app" {
		t.Fatalf("Status: %+v, %v; want the meters points, content, app", st, err)
	}
}
