package headers

import "github.com/ratemonitor/ratemonitor/internal/headerparse"

// Field names in canonical form (http.CanonicalHeaderKey), so that looking them up in an
// http.Header does not allocate. Servers write them as in the comments; HTTP field names are
// case-insensitive.
const (
	fieldRetryAfter      = headerparse.FieldRetryAfter
	fieldDate            = headerparse.FieldDate
	fieldMinRemaining    = "X-Minlimit-Remaining"    // X-MinLimit-Remaining
	fieldDayRemaining    = "X-Daylimit-Remaining"    // X-DayLimit-Remaining
	fieldAppMinRemaining = "X-Appminlimit-Remaining" // X-AppMinLimit-Remaining
	fieldProblem         = "X-Rate-Limit-Problem"
	fieldPolicy          = "Ratelimit-Policy" // RateLimit-Policy
	fieldRateLimit       = "Ratelimit"        // RateLimit
	fieldXLimit          = headerparse.FieldXLimit
	fieldXRemaining      = headerparse.FieldXRemaining
	fieldXReset          = headerparse.FieldXReset

	fieldShopifyCallLimit      = "X-Shopify-Shop-Api-Call-Limit"
	fieldHubSpotMax            = "X-Hubspot-Ratelimit-Max"
	fieldHubSpotRemaining      = "X-Hubspot-Ratelimit-Remaining"
	fieldHubSpotInterval       = "X-Hubspot-Ratelimit-Interval-Milliseconds"
	fieldHubSpotDaily          = "X-Hubspot-Ratelimit-Daily"
	fieldHubSpotDailyRemaining = "X-Hubspot-Ratelimit-Daily-Remaining"
)
