package conformance

import (
	"path"
	"strings"
)

// knownDefects are the cases that fail only because of a defect of issue 13 that is being fixed
// elsewhere. A case listed here still runs and checks everything; its failures are logged as
// "KNOWN DEFECT n" instead of failing the test. Delete an entry (or the whole table) once its fix
// is merged: the case then fails again if the fix is incomplete.
var knownDefects = []knownDefect{
	// Defect 1: two Transports on one key, one wrapping the other, count a request twice.
	{store: "*", test: "TestConformance/stacked", defect: 1, why: "stacked Transports count twice"},
	// Defect 2: the same window with another granularity or margin is a separate counter, so
	// two Transports together admit twice the limit.
	{store: "*", test: "TestConformance/split", defect: 2, why: "same window, different granularity or margin, separate counts"},
	// Defect 4: after a step back, records are dropped (fixed and rolling window) and the key
	// answers at its latest instant for the whole hour while telling a wait of a few hundred ms.
	{store: "*", test: "TestConformance/clockback/*", defect: 4, why: "clock stepped back: records dropped, key locked out for the hour"},
	// Defect 3: 64 goroutines on one key make DynamoDB's conditional writes fail past the
	// retries (ErrContended), which the middleware answers with 503 and a FailOpen Transport
	// sends uncounted. Only those failures are gated; a model violation still fails.
	{store: "dynamodb", msg: "contention", defect: 3, why: "DynamoDB contention is an error"},
	{store: "dynamodb", msg: "middleware answered 503", defect: 3, why: "DynamoDB contention is an error"},
}

type knownDefect struct {
	store  string // Target.Name, or a path.Match pattern
	test   string // a path.Match pattern on the subtest's full name; "" for every case
	msg    string // when set, only failures whose text holds it are gated
	defect int    // the defect's number in issue 13
	why    string
}

// known returns the entry of knownDefects that gates the failure fail of a case, if any.
func known(store, test, fail string) (knownDefect, bool) {
	for _, k := range knownDefects {
		okStore, _ := path.Match(k.store, store)
		okTest, _ := path.Match(k.test, test)
		okTest = okTest || k.test == ""
		if okStore && okTest && strings.Contains(fail, k.msg) {
			return k, true
		}
	}
	return knownDefect{}, false
}
