package cicheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// requirements reads the module paths a go.mod requires, split into direct and indirect ones.
func requirements(t *testing.T, gomod string) (direct, indirect []string) {
	t.Helper()
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	inBlock := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if strings.Contains(line, "// indirect") {
			indirect = append(indirect, f[0])
		} else {
			direct = append(direct, f[0])
		}
	}
	return direct, indirect
}

// TestCoreModuleStaysLight: the core module (the repository root) requires only what the core's
// packages and tests use; the heavy backends are modules of their own (docs/packages.md, issue 16).
// A new requirement of the core must be added here on purpose. golang.org/x/time is a test-only
// one: the cache package's benchmarks run x/time/rate beside the memory store (issue 17), and no
// non-test file may import it (TestRateIsTestOnly). (.ci/run checks every go.mod is
// tidy, so a core package that imported a heavy module would fail there first.)
func TestCoreModuleStaysLight(t *testing.T) {
	direct, indirect := requirements(t, filepath.Join("..", "..", "go.mod"))
	wantDirect := []string{
		"github.com/dgraph-io/ristretto/v2", "github.com/dunglas/httpsfv", "github.com/eko/gocache/lib/v4",
		"github.com/eko/gocache/store/ristretto/v4", "github.com/hashicorp/go-retryablehttp",
		"github.com/realclientip/realclientip-go", "go.uber.org/goleak", "golang.org/x/time", "pgregory.net/rapid",
	}
	if !slices.Equal(direct, wantDirect) {
		t.Errorf("the core's go.mod requires %v, want %v", direct, wantDirect)
	}
	heavy := []string{"github.com/redis/", "github.com/aws/", "modernc.org/", "github.com/prometheus/", "gonum.org/", "github.com/go-redis/"}
	for _, m := range append(direct, indirect...) {
		for _, h := range heavy {
			if strings.HasPrefix(m, h) {
				t.Errorf("the core's go.mod requires %s: heavy modules belong to the store, metrics and program modules", m)
			}
		}
	}
}

// TestWorkspaceHasEveryModule: every go.mod of the repository is in go.work, so the README's
// test command (an import-path pattern over the workspace) tests it.
func TestWorkspaceHasEveryModule(t *testing.T) {
	root := filepath.Join("..", "..")
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, line := range strings.Split(string(work), "\n") {
		if f := strings.Fields(line); len(f) == 1 && (f[0] == "." || strings.HasPrefix(f[0], "./")) {
			used[filepath.Clean(f[0])] = true
		}
	}
	n := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		n++
		if !used[rel] {
			t.Errorf("%s has a go.mod that go.work does not use: go work use ./%s", rel, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("found %d go.mod files, want the 10 modules of the workspace", n)
	}
}

// TestRateIsTestOnly: golang.org/x/time is in the core's go.mod only for the benchmarks that
// measure the memory store against x/time/rate (issue 17); no non-test file of the core module
// imports it, so a program using the library never compiles it.
func TestRateIsTestOnly(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module of the workspace
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), "golang.org/x/time") {
				t.Errorf("%s imports %s: x/time is a test-only requirement of the core", p, imp.Path.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
