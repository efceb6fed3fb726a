package conformance

import "path"

// knownDefects are the cases that fail only because of a defect of issue 13 that is being fixed
// elsewhere. A case listed here still runs and checks everything; its failures are logged as
// "KNOWN DEFECT n" instead of failing the test. Delete an entry (or the whole table) once its fix
// is merged: the case then fails again if the fix is incomplete.
var knownDefects = []knownDefect{
	// Defect 4: after a step back, records are dropped (fixed and rolling window) and the key
	// answers at its latest instant for the whole hour while telling a wait of a few hundred ms.
	{store: "*", test: "TestConformance/clockback/*", defect: 4, why: "clock stepped back: records dropped, key locked out for the hour"},
}

type knownDefect struct {
	store  string // Target.Name, or a path.Match pattern
	test   string // a path.Match pattern on the subtest's full name
	defect int    // the defect's number in issue 13
	why    string
}

// known returns the entry of knownDefects that gates the case, if any.
func known(store, test string) (knownDefect, bool) {
	for _, k := range knownDefects {
		okStore, _ := path.Match(k.store, store)
		okTest, _ := path.Match(k.test, test)
		if okStore && okTest {
			return k, true
		}
	}
	return knownDefect{}, false
}
