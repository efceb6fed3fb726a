package docs

import (
	"net/http"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/profiles"
)

// changedProfile is docs/profiles.md's "Change a profile".
func changedProfile() (*ratemonitor.Transport, error) {
	p := profiles.GitHubREST()
	p.Rules[0].Limit = 1000        // a GITHUB_TOKEN in Actions: 1000 an hour
	points, _ := p.Meter("points") // a copy
	points.Rules[0].Limit /= 10    // a test against a stand-in scaled down ten times
	p.SetMeter(points)             // in place of the profile's; its content meter is kept
	tr, err := ratemonitor.New(http.DefaultTransport, p.Options()...)
	return tr, err
}
