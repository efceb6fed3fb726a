package profiles_test

import (
	"context"
	"fmt"
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
			p.Meters = []ratemonitor.Meter{points}
		}, "", "[1000/1h0m0s (margin 1s)]", 90},
		{"the points meter dropped", func(p *profiles.Profile) { p.Meters = nil }, "", "[5000/1h0m0s (margin 1s)]", 0},
		{"a second meter added", func(p *profiles.Profile) {
			p.Meters = append(p.Meters, ratemonitor.Meter{Name: "search", Rules: []strategy.Rule{{Limit: 30, Window: time.Minute}}})
		}, `profiles.GitHubREST: ratemonitor: WithMeter("search"): a meter is already set ("points"`, "", 0},
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
			case c.wantPoints == 0 && st.App != nil:
				t.Errorf("a meter %+v, want none", st.App)
			case c.wantPoints != 0 && (st.App == nil || st.App.Rules[0].Rule.Limit != c.wantPoints):
				t.Errorf("the points meter is %+v, want a limit of %d", st.App, c.wantPoints)
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
