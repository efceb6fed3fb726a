package profiles

import (
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/strategy"
)

// slackTierLimits are the requests a minute of Slack's Web API tiers 1 to 4 (index 0 is
// unused). Source: Slack, "Rate limits", https://docs.slack.dev/apis/web-api/rate-limits: Tier 1
// 1+ per minute, Tier 2 20+, Tier 3 50+, Tier 4 100+, each per method, per workspace, per app;
// each method's reference page names its tier.
var slackTierLimits = [5]int{0, 1, 20, 50, 100}

// Slack paces a Slack Web API client whose methods are all of one tier (1 to 4): requests are
// keyed by method and token (the URL path, such as /api/conversations.history, and a digest of
// the Authorization header: Slack counts per method per workspace, and a token belongs to one
// workspace), each held to the tier's published floor a minute, with a 1 s margin.
//
// Slack's 429 carries Retry-After in seconds, which pauses that method's key; a 429 without
// it pauses for a minute. Methods of other tiers, and the special tier of chat.postMessage (1
// message a second per channel), need a Transport of their own. An app not approved for the
// Slack Marketplace gets Tier 1 (1 a minute) on conversations.history and
// conversations.replies (Slack, "Rate limit changes for non-Marketplace apps",
// https://api.slack.com/changelog/2025-05-terms-rate-limit-update-and-faq): use Slack(1) for
// those. Two tokens of one workspace and app are counted apart here, though Slack counts them
// together: give them one key (WithKeyFunc) if you use several. A tier outside 1 to 4 makes
// New fail.
func Slack(tier int) Profile {
	if tier < 1 || tier > 4 {
		return failed("profiles.Slack", "Slack(%d): Slack's Web API tiers are 1 to 4", tier)
	}
	return Profile{
		Name:   "profiles.Slack",
		Key:    func(req *http.Request) string { return byCredential(req) + " " + req.URL.Path },
		Rules:  []strategy.Rule{{Limit: slackTierLimits[tier], Window: time.Minute, Margin: time.Second}},
		Sync:   &ratemonitor.SyncConfig{Readers: []headers.Reader{}, Fallback: time.Minute},
		Pacing: true,
	}
}
