package profiles

// The figures the profiles hold, for the tests of package profiles_test.
const (
	GitHubHourLimit           = githubHourLimit
	GitHubInFlight            = githubInFlight
	GitHubMinutePoints        = githubMinutePoints
	GitHubGraphQLMinutePoints = githubGraphQLMinutePoints
	GitHubContentMinute       = githubContentMinute
	HubSpotTenSecondLimit     = hubSpotTenSecondLimit
	ShopifyRESTBucket         = shopifyRESTBucket
	ShopifyRESTLeakRate       = shopifyRESTLeakRate
	StripeLiveLimit           = stripeLiveLimit
	XeroMinuteLimit           = xeroMinuteLimit
	XeroInFlight              = xeroInFlight
)
