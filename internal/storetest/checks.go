package storetest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// FewChecks lowers rapid's number of checks to n for the rest of tb (restored by tb.Cleanup),
// for a property over a slow store that must keep CI's -race run short; a -rapid.checks given
// on the command line (or RAPID_CHECKS) is left as it is. Tests that call it must not run in
// parallel with other rapid properties of their package.
func FewChecks(tb testing.TB, n int) {
	f := flag.Lookup("rapid.checks")
	if f == nil || f.Value.String() != f.DefValue || os.Getenv("RAPID_CHECKS") != "" {
		return
	}
	old := f.Value.String()
	if err := flag.Set("rapid.checks", strconv.Itoa(n)); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { flag.Set("rapid.checks", old) })
}
