// Package rulecheck holds the checks every algorithm makes of a rule, granularity aside, so
// that package strategy (Rule.Validate, ParseRule) and package strategy/engine (New, for the
// algorithms that use no time buckets) make them alike without strategy exporting a
// validation users have no use for.
package rulecheck

import (
	"fmt"
	"time"
)

// Base returns what is wrong with a rule's figures whatever the algorithm, or "" when nothing
// is: a limit below 1, a window that is not positive, a negative granularity or margin,
// headroom not in [0, limit), or window, margin or window+margin longer than maxWindow.
func Base(limit int, window, granularity, margin time.Duration, headroom int, maxWindow time.Duration) string {
	switch {
	case limit < 1:
		return fmt.Sprintf("limit is %d, it must be at least 1", limit)
	case window <= 0:
		return fmt.Sprintf("window %v must be positive", window)
	case granularity < 0:
		return fmt.Sprintf("granularity %v is negative", granularity)
	case margin < 0:
		return fmt.Sprintf("margin %v is negative", margin)
	case headroom < 0 || headroom >= limit:
		return fmt.Sprintf("headroom %d must be at least 0 and less than the limit %d", headroom, limit)
	case window > maxWindow || margin > maxWindow || window+margin > maxWindow:
		return fmt.Sprintf("window+margin is longer than %v", maxWindow)
	}
	return ""
}
