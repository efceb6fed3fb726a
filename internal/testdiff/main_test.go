package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write makes a tree under a new temporary directory: path → content.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const oldTests = `package p

import "testing"

func TestA(t *testing.T) {
	if 1+1 != 2 {
		t.Errorf("sum %d, want 2", 1+1)
	}
}

func TestB(t *testing.T) {
	if got := 3; got != 3 {
		t.Fatalf("got %d", got)
	}
}

func TestSuite(t *testing.T) { runSuite(t) }

func runSuite(t *testing.T) {
	t.Error("suite")
}
`

// TestReportTellsMovesFromDrops compares an old tree with new ones and checks the verdict and
// the line each function gets.
func TestReportTellsMovesFromDrops(t *testing.T) {
	old := write(t, map[string]string{"p/a_test.go": oldTests})
	for _, c := range []struct {
		name        string
		files       map[string]string
		mapping     string
		wantDropped bool
		wantLines   []string
	}{
		{"unchanged", map[string]string{"p/a_test.go": oldTests}, "", false, nil},
		{"moved and renamed", map[string]string{"p/b_test.go": strings.Replace(oldTests, "func TestB(", "func TestBHolds(", 1)}, "", false,
			[]string{"moved    p TestA: a_test.go → p/b_test.go", "renamed  p TestB (a_test.go) → TestBHolds (p/b_test.go)"}},
		{"assertion dropped", map[string]string{"p/a_test.go": strings.Replace(oldTests, `t.Errorf("sum %d, want 2", 1+1)`, `_ = 0`, 1)}, "", true,
			[]string{"DROPPED  p TestA (a_test.go) (name kept): 1 assertions, 1 not found"}},
		{"assertion reworded, mapped", map[string]string{"p/a_test.go": strings.Replace(oldTests, `"sum %d, want 2"`, `"%s: sum %d, want 2", "case"`, 1)},
			"p\tErrorf(\"sum %d, want 2\", 1 + 1)\tErrorf(\"%s: sum %d, want 2\", \"case\", 1 + 1)\n", false,
			[]string{"changed  p TestA (a_test.go) (name kept): 1 assertions, 0 not found"}},
		{"moved to another package and changed", map[string]string{"p/a_test.go": strings.Replace(oldTests, "func TestA(t *testing.T) {\n\tif 1+1 != 2 {\n\t\tt.Errorf(\"sum %d, want 2\", 1+1)\n\t}\n}\n", "", 1),
			"q/a_test.go": "package q\n\nimport \"testing\"\n\nfunc TestA(t *testing.T) {\n\tif 2 != 2 {\n\t\tt.Errorf(\"sum %d, want 2\", 1+1)\n\t}\n}\n"}, "", false,
			[]string{"changed  p TestA (a_test.go) (moved to q): 1 assertions, 0 not found"}},
		{"moved to another package, assertion dropped", map[string]string{"p/a_test.go": strings.Replace(oldTests, "func TestA(t *testing.T) {\n\tif 1+1 != 2 {\n\t\tt.Errorf(\"sum %d, want 2\", 1+1)\n\t}\n}\n", "", 1),
			"q/a_test.go": "package q\n\nimport \"testing\"\n\nfunc TestA(t *testing.T) {}\n"}, "", true,
			[]string{"DROPPED  p TestA (a_test.go) (moved to q): 1 assertions, 1 not found"}},
		{"suite runner gone, suite still run", map[string]string{"p/a_test.go": strings.Replace(oldTests, "func TestSuite(t *testing.T) { runSuite(t) }", "func TestSuiteHolds(t *testing.T) { t.Log(); runSuite(t) }", 1)}, "", false,
			[]string{"gone     p TestSuite (a_test.go): no assertions of its own; all it called is still called"}},
		{"suite runner gone with its suite's only call", map[string]string{"p/a_test.go": strings.Replace(oldTests, "func TestSuite(t *testing.T) { runSuite(t) }", "", 1)}, "", true,
			[]string{"UNCALLED p TestSuite (a_test.go): no assertions of its own, and nothing calls [runSuite] any more"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, err := load(old)
			if err != nil {
				t.Fatal(err)
			}
			after, err := load(write(t, c.files))
			if err != nil {
				t.Fatal(err)
			}
			mapFile := filepath.Join(t.TempDir(), "map")
			if err := os.WriteFile(mapFile, []byte(c.mapping), 0o644); err != nil {
				t.Fatal(err)
			}
			rewrites, err := readMap(mapFile)
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.CreateTemp(t.TempDir(), "report")
			if err != nil {
				t.Fatal(err)
			}
			dropped := report(out, before, after, rewrites, false)
			out.Close()
			b, err := os.ReadFile(out.Name())
			if err != nil {
				t.Fatal(err)
			}
			if dropped != c.wantDropped {
				t.Errorf("dropped %v, want %v:\n%s", dropped, c.wantDropped, b)
			}
			for _, l := range c.wantLines {
				if !strings.Contains(string(b), l+"\n") {
					t.Errorf("no line %q in:\n%s", l, b)
				}
			}
		})
	}
}
