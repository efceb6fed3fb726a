package profiles

import (
	"net/http"
	"strings"
	"time"

	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/bodypeek"
	"github.com/ratemonitor/ratemonitor/internal/headerparse"
)

// githubReader reads GitHub's X-RateLimit-* fields for one resource, knowing the request (so
// that an unauthenticated one's figures are scaled to its charge), and a secondary-limit
// refusal from its message. It is the GitHub profiles' cost.Reader; its costs are Unknown
// unless body (GraphQL's data.rateLimit) says.
type githubReader struct {
	resource string // X-RateLimit-Resource of the figures read
	name     string
	body     cost.Declared
	hasBody  bool
}

// ReadCost reads the header (and, for GraphQL, body gives it, the body; see githubBodyReader).
func (g githubReader) ReadCost(resp *http.Response, now time.Time) cost.Report {
	rep := cost.Report{Cost: cost.Unknown}
	if headerparse.GitHubSecondaryWithin(resp, githubSecondaryWait) {
		// GitHub: "wait for at least one minute before retrying"; the fallback pause is that.
		rep.Signals = append(rep.Signals, headers.Signal{Window: time.Hour, Remaining: 0, Limit: headers.Unknown, Reset: time.Minute})
	}
	if r := strings.TrimSpace(resp.Header.Get("X-RateLimit-Resource")); r != "" && !strings.EqualFold(r, g.resource) {
		return rep // another resource's limit (search: 30 a minute)
	}
	x := headerparse.ParseXRateLimit(resp.Header, now, headerparse.ResetEpoch)
	if x.Remaining == headers.Unknown {
		return rep
	}
	sig := headers.Signal{Window: time.Hour, Remaining: x.Remaining, Limit: x.Limit, Reset: x.Reset}
	if sig.Reset > time.Hour {
		sig.Reset = time.Hour // GitHub's windows are an hour: a later reset is garbled
	}
	if resp.Request != nil && resp.Request.Header.Get("Authorization") == "" {
		// charged githubUnauthenticatedCost points a request: the figures in those points
		sig.Remaining = min(x.Remaining, githubUnauthenticatedHourLimit) * githubUnauthenticatedCost
		sig.Limit = headers.Unknown
	}
	rep.Signals = append(rep.Signals, sig)
	return rep
}

// Windows declares the hour.
func (g githubReader) Windows() []headers.Window { return []headers.Window{{Window: time.Hour}} }

func (g githubReader) String() string { return g.name }

// githubBodyReader is githubReader for GraphQL: a cost.BodyReader whose body is
// cost.GitHubGraphQL's.
type githubBodyReader struct{ githubReader }

// ReadHead reads the header.
func (g githubBodyReader) ReadHead(resp *http.Response, now time.Time) cost.Report {
	return g.githubReader.ReadCost(resp, now)
}

// ReadBody reads data.rateLimit.
func (g githubBodyReader) ReadBody(resp *http.Response, b cost.Body, now time.Time) cost.Report {
	return g.body.ReadBody(resp, b, now)
}

// ReadCost reads the header, then the body at once (cost.Declared.ReadCost), its figures
// winning.
func (g githubBodyReader) ReadCost(resp *http.Response, now time.Time) cost.Report {
	rep := g.ReadHead(resp, now)
	if !cost.Wants(resp) {
		return rep
	}
	b, whole := bodypeek.Peek(resp, cost.MaxBody)
	if !whole {
		return rep
	}
	br := g.ReadBody(resp, cost.Body{Head: b, Whole: true}, now)
	if br.Cost != cost.Unknown {
		rep.Cost = br.Cost
	}
	if len(br.Signals) > 0 {
		rep.Signals = br.Signals
	}
	return rep
}
