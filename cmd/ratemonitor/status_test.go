package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/redisstore"
	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/fixedcount"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// TestStatusPrintsUsageTableSQLite: status prints, per rule, the requests used, the remaining
// allocation and the wait, whether the key is given as an argument (before or after the flags)
// or as --header-key; a key with nothing recorded is said so on stderr, with exit 3.
func TestStatusPrintsUsageTableSQLite(t *testing.T) {
	s := must(rollingwindow.New(rule(60, time.Hour), rule(5000, 24*time.Hour)))
	url := sqliteWith(t, s, "key:alice", 3)
	want := fmt.Sprintf(`key "key:alice", rollingwindow, %s
RULE          USED  REMAINING  WAIT FOR 1
60/1h0m0s     3     57         0s
5000/24h0m0s  3     4997       0s
all rules: wait 0s for 1 more; not paused
`, url)
	for _, args := range [][]string{
		{"status", "--store", url, "--rule", "60/1h", "--rule", "5000/24h", "key:alice"},
		{"status", "--header-key", "alice", "--store", url, "--rule", "60/1h", "--rule", "5000/24h"},
		{"status", "key:alice", "--store", url, "--rule", "60/1h", "--rule", "5000/24h", "--strategy", "rollingwindow"}, // flags after KEY
	} {
		code, out, errs := runCmd(t, context.Background(), args...)
		if code != 0 || out != want || errs != "" {
			t.Errorf("%q: exit %d\n%s\nwant\n%s\nstderr: %s", args, code, out, want, errs)
		}
	}
	// A key with nothing recorded: said so, exit 3, no table of zeros.
	code, out, errs := runCmd(t, context.Background(), "status", "--store", url, "--rule", "60/1h", "key:bob")
	if want := fmt.Sprintf("ratemonitor: status: nothing recorded for key \"key:bob\" in %s under the rules 60/1h0m0s (rollingwindow): "+
		"no counter exists, or all its requests have expired; check the KEY, --rule and --strategy the key is counted under\n", url); code != 3 || out != "" || errs != want {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errs, want)
	}
}

// TestStatusFixedWindowFullWaitsRestOfWindowSQLite fills a fixed window: used and remaining
// exact, the wait the rest of the window. The window is the UTC hour, so the wait is checked
// against the clock read just before and after the status; and should an hour begin between the
// record and the status (the count would then be in the hour before), the test runs again.
func TestStatusFixedWindowFullWaitsRestOfWindowSQLite(t *testing.T) {
	s := must(fixedwindow.New(rule(10, time.Hour)))
	var code int
	var out, errs string
	var before, after time.Time
	for {
		recorded := time.Now()
		url := sqliteWith(t, s, "tenant-1", 12)
		before = time.Now()
		code, out, errs = runCmd(t, context.Background(), "status", "--json", "--strategy", "fixedwindow", "--store", url, "--rule", "10/1h", "tenant-1")
		after = time.Now()
		if fixedcount.WindowStart(recorded, time.Hour).Equal(fixedcount.WindowStart(after, time.Hour)) {
			break
		}
	}
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	end := fixedcount.WindowStart(before, time.Hour).Add(time.Hour)
	if len(rep.Rules) != 1 || rep.Rules[0].Used != 12 || rep.Rules[0].Remaining != 0 || rep.Rules[0].Limit != 10 || rep.Rules[0].WindowSeconds != 3600 {
		t.Fatalf("rules %+v", rep.Rules)
	}
	lo, hi := end.Sub(after), end.Sub(before)
	if w := time.Duration(rep.WaitNS); w < lo || w > hi || time.Duration(rep.Rules[0].WaitNS) < lo || time.Duration(rep.Rules[0].WaitNS) > hi || rep.PausedUntil != nil || rep.Strategy != "fixedwindow" || rep.Key != "tenant-1" {
		t.Fatalf("wait %v, want %v to %v: %+v", w, lo, hi, rep)
	}
}

// wildcards replaces the figures that depend on the clock by "*": waits of minutes or hours
// and instants. A wait read within a millisecond of the record is rounded up to a whole hour
// ("1h0m0s", as it is at once without -race), one read later is "59m59.998s": both are waits.
// Rule names ("60/1h0m0s") follow a "/", so they stay.
// The table's columns are as wide as those figures, so runs of spaces are made two.
var (
	wildcards = regexp.MustCompile(`(^|[ ])((\d+h)?\d+m\d+(\.\d+)?s|\d{4}-\d\d-\d\dT[0-9:.]+Z)`)
	spaces    = regexp.MustCompile(` {2,}`)
)

// TestStatusShowsPauseAndUpstreamCountRedis: over Redis, status shows a full hour rule, the day
// rule's count raised by what the upstream said (4000 remaining) and the pause of a 429 (30 min),
// as a table and as JSON (the waits read against the clock before and after); --prefix looks
// under another prefix, and rules the store cannot hold exit 2.
func TestStatusShowsPauseAndUpstreamCountRedis(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client()
	st := must(redisstore.New(rc, redisstore.Options{Timeout: 5 * time.Second}))
	ctx := context.Background()
	day := strategy.Rule{Limit: 5000, Window: 24 * time.Hour, Granularity: 10 * time.Second}
	s := must(rollingwindow.New(rule(60, time.Hour), day))
	before := time.Now()
	if err := st.Record(ctx, s, "tenant-1", 60); err != nil {
		t.Fatal(err)
	}
	// An upstream 429 with Retry-After: 1800 and X-DayLimit-Remaining: 4000.
	if err := st.Sync(ctx, s, "tenant-1", engine.Update{Pause: 30 * time.Minute,
		Reports: []engine.Report{{Rule: 1, Remaining: 4000, Used: 1000}}}); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + srv.Addr
	args := []string{"status", "--store", url, "--rule", "60/1h", "--rule", "5000/24h,granularity=10s", "tenant-1"}
	code, out, errs := runCmd(t, ctx, args...)
	want := fmt.Sprintf(`key "tenant-1", rollingwindow, %s
RULE  USED  REMAINING  WAIT FOR 1  UPSTREAM SAID
60/1h0m0s  60  0  *  -
5000/24h0m0s (granularity 10s)  1000  4000  *  4000 remaining at *
all rules: wait * for 1 more; paused for *, until *
`, url)
	if got := spaces.ReplaceAllString(wildcards.ReplaceAllString(out, "${1}*"), "  "); code != 0 || got != want {
		t.Errorf("exit %d, stderr %s\n%s\nwant\n%s", code, errs, got, want)
	}
	t.Log("\n" + out)

	code, out, errs = runCmd(t, ctx, append([]string{"status", "--json"}, args[1:]...)...)
	after := time.Now()
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	within := func(what string, d, lo, hi time.Duration) {
		t.Helper()
		if d < lo || d > hi {
			t.Errorf("%s %v, want %v to %v", what, d, lo, hi)
		}
	}
	// The hour rule: 60 recorded at before…after, free an hour later; the pause lasts 30 min.
	within("hour rule's wait", time.Duration(rep.Rules[0].WaitNS), time.Hour-after.Sub(before)-time.Second, time.Hour)
	within("day rule's wait (the pause)", time.Duration(rep.Rules[1].WaitNS), 30*time.Minute-after.Sub(before)-time.Second, 30*time.Minute)
	within("wait", time.Duration(rep.WaitNS), time.Hour-after.Sub(before)-time.Second, time.Hour)
	within("pause", time.Duration(rep.PauseNS), 30*time.Minute-after.Sub(before)-time.Second, 30*time.Minute)
	if r := rep.Rules; r[0].Used != 60 || r[0].Remaining != 0 || r[1].Used != 1000 || r[1].Remaining != 4000 || r[1].Reported == nil || *r[1].Reported != 4000 || r[0].Reported != nil {
		t.Errorf("rules %+v", r)
	}

	// --prefix names the store's key prefix: another prefix holds nothing for the key, and
	// status says which prefix it looked under.
	code, out, errs = runCmd(t, ctx, "status", "--store", url, "--prefix", "other", "--rule", "60/1h", "tenant-1")
	if want := "ratemonitor: status: nothing recorded for key \"tenant-1\" in " + url + " under prefix \"other\" under the rules 60/1h0m0s (rollingwindow): " +
		"no counter exists, or all its requests have expired; check the KEY, --prefix (" + examplePrefixes + "), --rule and --strategy the key is counted under\n"; code != 3 || out != "" || errs != want {
		t.Errorf("--prefix other: exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errs, want)
	}
	// A day at 1 s granularity (asked for: the default for a day is 24 min) is 86 400 buckets:
	// more than the Redis store holds.
	code, _, errs = runCmd(t, ctx, "status", "--store", url, "--rule", "5000/24h,granularity=1s", "tenant-1")
	if code != 2 || !strings.HasPrefix(errs, "ratemonitor: --store "+url+" cannot hold these rules under rollingwindow: ") {
		t.Errorf("exit %d: %s", code, errs)
	}
}

// TestStatusTokenBucketAndMissingTableDynamoDB: over DynamoDB, a token bucket with 4 of 10
// spent is shown as 4 used; a table that does not exist exits 1, naming it.
func TestStatusTokenBucketAndMissingTableDynamoDB(t *testing.T) {
	srv := dynalitetest.Start(t)
	table := srv.CreateTable(dynamostore.CreateTable, "limits")
	st := must(dynamostore.New(srv.Client(), dynamostore.Options{Table: table}))
	defer st.Close()
	s := must(tokenbucket.New(rule(10, time.Hour)))
	for range 4 {
		if res, err := st.Reserve(context.Background(), s, "ip:203.0.113.7", 1); err != nil || !res.Allowed {
			t.Fatal(res, err)
		}
	}
	url := "dynamodb+" + srv.Endpoint + "?table=" + table
	code, out, errs := runCmd(t, context.Background(), "status", "--strategy", "tokenbucket", "--store", url, "--rule", "10/1h", "ip:203.0.113.7")
	// Tokens come back one per 6 minutes: used is 4, rounded up, for the next 6.
	want := fmt.Sprintf(`key "ip:203.0.113.7", tokenbucket, %s
RULE       USED  REMAINING  WAIT FOR 1
10/1h0m0s  4     6          0s
all rules: wait 0s for 1 more; not paused
`, url)
	if code != 0 || out != want {
		t.Errorf("exit %d, stderr %s\n%s\nwant\n%s", code, errs, out, want)
	}
	code, _, errs = runCmd(t, context.Background(), "status", "--store", "dynamodb+"+srv.Endpoint+"?table=nosuch", "--rule", "10/1h", "k")
	if code != 1 || !strings.Contains(errs, "nosuch") {
		t.Errorf("missing table: exit %d: %s", code, errs)
	}
}
