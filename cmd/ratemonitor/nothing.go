package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ratemonitor/ratemonitor/cache/redisstore"
)

// exitNothing is status's exit status when the store holds nothing for the key under the
// rules given: no counter, or one whose requests have all expired. Zeros would look like an
// idle key when the usual cause is a wrong KEY, --prefix, --rule or --strategy.
const exitNothing = 3

// examplePrefixes names the Redis key prefixes this repository's programs write under, for
// the message and -h (TestExamplePrefixes keeps them true).
const examplePrefixes = `xero_example writes under "xero_example"; cmd/ratelimitd and ` +
	`examples/redisworker under the default "ratemonitor"`

// nothingError is status's answer for a key with nothing recorded.
type nothingError struct{ msg string }

func (e *nothingError) Error() string { return e.msg }

// empty reports whether rep shows nothing recorded: no request counts under any rule, no
// upstream report and no pause.
func empty(rep *report) bool {
	if rep.PausedUntil != nil {
		return false
	}
	for _, r := range rep.Rules {
		if r.Used != 0 || r.Reported != nil {
			return false
		}
	}
	return true
}

// nothingFound says what was looked for, where, and what to check.
func nothingFound(cfg *config, st *store) error {
	rules := make([]string, len(cfg.rules))
	for i, r := range cfg.rules {
		rules[i] = r.String()
	}
	where := st.name
	check := "KEY, --rule and --strategy"
	if strings.HasPrefix(cfg.store, "redis://") {
		prefix := cfg.prefix
		if prefix == "" {
			prefix = redisstore.DefaultPrefix
		}
		where += " under prefix " + strconv.Quote(prefix)
		check = "KEY, --prefix (" + examplePrefixes + "), --rule and --strategy"
	}
	return &nothingError{fmt.Sprintf("status: nothing recorded for key %q in %s under the rules %s (%s): "+
		"no counter exists, or all its requests have expired; check the %s the key is counted under",
		cfg.key, where, strings.Join(rules, ", "), cfg.strat.Name(), check)}
}
