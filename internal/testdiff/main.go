// Command testdiff compares the test code of two trees (before and after a reorganisation of the
// tests) and says whether any assertion was lost.
//
// It parses every _test.go file of both trees with go/ast and, per directory, lists each
// top-level function's assertions: every call of Error, Errorf, Fatal, Fatalf, Fail or FailNow
// (on any receiver: t, tb, b, a helper's) keyed by its printed arguments with the receiver
// dropped, and every Example's Output. Then:
//
//   - a function whose body is unchanged (same printed body, whatever its name or file) is a
//     move or a rename: listed, nothing to check;
//   - every other old function's assertions must each still be found, with at least as many
//     copies over the directory as before, unless a table now runs them (-merged), in the new
//     tree's same directory (after -map's rewrites); or, for a function whose name is gone from
//     its directory and found in exactly one other (moved to another package and adapted to
//     it), in that one;
//   - an old function without assertions of its own (a test that runs a suite or a helper)
//     that is gone must leave every function it called still called in that directory;
//   - an assertion of the old tree found nowhere in the new one is reported as dropped, and
//     testdiff exits 1.
//
// Usage (.ci/testdiff wraps it with a git revision):
//
//	go run ./internal/testdiff -old /tmp/base -new . [-map FILE] [-v]
//
// FILE has lines "DIR<TAB>OLD<TAB>NEW": in DIR, the old assertion key OLD is now written NEW (a
// table's t.Errorf("%s: …", tc.name, …) for five copies with their own wording). Keys are
// printed with -v. A line "DIR<TAB>call:NAME<TAB>WHY" accounts for a function no test of DIR
// calls any more (a helper replaced by another).
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// fn is one top-level function of a test file.
type fn struct {
	dir, file, name string
	body            string   // sha256 of the printed body (and receiver, parameters)
	asserts         []string // assertion keys, in source order
	calls           []string // names of the functions and methods it calls
}

// tree is the test code of one tree, per directory.
type tree map[string][]*fn

var assertSel = map[string]bool{"Error": true, "Errorf": true, "Fatal": true, "Fatalf": true, "Fail": true, "FailNow": true}

func main() {
	oldDir := flag.String("old", "", "the tree before (required)")
	newDir := flag.String("new", ".", "the tree after")
	mapFile := flag.String("map", "", "rewrites of assertion keys: DIR<TAB>OLD<TAB>NEW lines")
	verbose := flag.Bool("v", false, "print every changed function's assertions and where each was found")
	flag.Parse()
	if *oldDir == "" {
		fmt.Fprintln(os.Stderr, "testdiff: -old is required: the tree before the change (git archive REV | tar -x -C DIR)")
		os.Exit(2)
	}
	before, err := load(*oldDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdiff:", err)
		os.Exit(2)
	}
	after, err := load(*newDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdiff:", err)
		os.Exit(2)
	}
	rewrites, err := readMap(*mapFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testdiff:", err)
		os.Exit(2)
	}
	if report(os.Stdout, before, after, rewrites, *verbose) {
		os.Exit(1)
	}
}

// load parses every _test.go file under root, skipping testdata and dot directories.
func load(root string) (tree, error) {
	t := tree{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		outputs := map[string]string{}
		for _, ex := range doc.Examples(f) {
			if ex.Output != "" || ex.EmptyOutput {
				outputs["Example"+ex.Name] = ex.Output
			}
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = print(fset, fd.Recv.List[0].Type) + "." + name
			}
			x := &fn{dir: rel, file: filepath.Base(path), name: name}
			x.body = hash(print(fset, fd.Type) + print(fset, fd.Body))
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					switch f := c.Fun.(type) {
					case *ast.Ident:
						x.calls = append(x.calls, f.Name)
					case *ast.SelectorExpr:
						x.calls = append(x.calls, f.Sel.Name)
					}
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && assertSel[s.Sel.Name] {
						args := make([]string, len(c.Args))
						for i, a := range c.Args {
							args[i] = print(fset, a)
						}
						x.asserts = append(x.asserts, s.Sel.Name+"("+strings.Join(args, ", ")+")")
					}
				}
				return true
			})
			if out, ok := outputs[fd.Name.Name]; ok {
				x.asserts = append(x.asserts, "Output: "+strings.TrimSpace(out))
			}
			t[rel] = append(t[rel], x)
		}
		return nil
	})
	return t, err
}

func print(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return b.String()
}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%x", h[:8])
}

// readMap reads the key rewrites: dir → old key → new key.
func readMap(path string) (map[string]map[string]string, error) {
	m := map[string]map[string]string{}
	if path == "" {
		return m, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if strings.TrimSpace(s) == "" || strings.HasPrefix(s, "#") {
			continue
		}
		parts := strings.Split(s, "\t")
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s:%d: want DIR<TAB>OLD<TAB>NEW, got %d fields", path, line, len(parts))
		}
		if m[parts[0]] == nil {
			m[parts[0]] = map[string]string{}
		}
		m[parts[0]][parts[1]] = parts[2]
	}
	return m, sc.Err()
}

// report writes the comparison and says whether an assertion was dropped.
func report(w *os.File, before, after tree, rewrites map[string]map[string]string, verbose bool) (dropped bool) {
	newBodies := map[string][]*fn{} // body hash → new functions, over the whole tree
	newNames := map[string]bool{}
	nameDirs := map[string][]string{} // function name → the new directories that have it
	for _, dir := range sortedKeys(after) {
		for _, f := range after[dir] {
			newBodies[f.body] = append(newBodies[f.body], f)
			newNames[f.dir+" "+f.name] = true
			if ds := nameDirs[f.name]; len(ds) == 0 || ds[len(ds)-1] != dir {
				nameDirs[f.name] = append(ds, dir)
			}
		}
	}
	haves := map[string]map[string]int{} // dir → its new assertion keys, with their counts
	haveIn := func(dir string) map[string]int {
		if haves[dir] == nil {
			haves[dir] = map[string]int{}
			for _, f := range after[dir] {
				for _, a := range f.asserts {
					haves[dir][a]++
				}
			}
		}
		return haves[dir]
	}
	// movedTo is where an old function of dir went when it is gone from dir under its name and
	// exactly one other directory has that name: moved to another package, and changed.
	movedTo := func(dir string, f *fn) string {
		if ds := nameDirs[f.name]; !newNames[dir+" "+f.name] && len(ds) == 1 {
			return ds[0]
		}
		return dir
	}
	var moved, renamed, changed, removedNoAsserts int
	var lines []string
	for _, dir := range sortedKeys(before) {
		have := haveIn(dir)
		called := map[string]bool{}
		for _, f := range after[dir] {
			for _, c := range f.calls {
				called[c] = true
			}
		}
		want := map[string]int{} // old assertion keys of dir (rewritten), with their counts
		for _, f := range before[dir] {
			if movedTo(dir, f) != dir {
				continue // counted where it went
			}
			for _, a := range f.asserts {
				want[rewrite(rewrites, dir, a)]++
			}
		}
		for _, f := range before[dir] {
			if same := pick(newBodies[f.body], dir); same != nil {
				switch {
				case same.name == f.name && same.file == f.file && same.dir == f.dir:
				case same.name == f.name:
					moved++
					lines = append(lines, fmt.Sprintf("moved    %s %s: %s → %s", dir, f.name, f.file, filepath.Join(same.dir, same.file)))
				default:
					renamed++
					lines = append(lines, fmt.Sprintf("renamed  %s %s (%s) → %s (%s)", dir, f.name, f.file, same.name, filepath.Join(same.dir, same.file)))
				}
				continue
			}
			if len(f.asserts) == 0 && !newNames[dir+" "+f.name] {
				// Its checks are in what it calls (a suite, a helper): each must still be called.
				var uncalled []string
				for _, c := range f.calls {
					_, accounted := rewrites[dir]["call:"+c] // -map: DIR, call:NAME, why
					if !called[c] && !accounted && !slices.Contains(uncalled, c) {
						uncalled = append(uncalled, c)
					}
				}
				removedNoAsserts++
				if len(uncalled) > 0 {
					dropped = true
					lines = append(lines, fmt.Sprintf("UNCALLED %s %s (%s): no assertions of its own, and nothing calls %v any more", dir, f.name, f.file, uncalled))
				} else {
					lines = append(lines, fmt.Sprintf("gone     %s %s (%s): no assertions of its own; all it called is still called", dir, f.name, f.file))
				}
				continue
			}
			changed++
			to := movedTo(dir, f)
			there := haveIn(to)
			var missing []string
			for _, a := range f.asserts {
				k := rewrite(rewrites, dir, a)
				if there[k] == 0 {
					missing = append(missing, k)
				}
			}
			status := "changed "
			if len(missing) > 0 {
				status = "DROPPED "
				dropped = true
			}
			where := "(name gone)"
			switch {
			case newNames[dir+" "+f.name]:
				where = "(name kept)"
			case to != dir:
				where = "(moved to " + to + ")"
			}
			lines = append(lines, fmt.Sprintf("%s %s %s (%s) %s: %d assertions, %d not found", status, dir, f.name, f.file, where, len(f.asserts), len(missing)))
			for _, k := range missing {
				lines = append(lines, "           not found: "+k)
			}
			if verbose {
				for _, a := range f.asserts {
					lines = append(lines, fmt.Sprintf("           %d now: %s", there[rewrite(rewrites, dir, a)], rewrite(rewrites, dir, a)))
				}
			}
		}
		for _, k := range sortedKeys(want) {
			if have[k] > 0 && have[k] < want[k] {
				lines = append(lines, fmt.Sprintf("fewer    %s: %d copies now, %d before (a table runs them, or check): %s", dir, have[k], want[k], k))
			}
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	var nOld, nNew, aOld, aNew int
	for _, fs := range before {
		for _, f := range fs {
			nOld++
			aOld += len(f.asserts)
		}
	}
	for _, fs := range after {
		for _, f := range fs {
			nNew++
			aNew += len(f.asserts)
		}
	}
	verdict := "nothing dropped: every old assertion is found in the new tree's same directory (or where its function moved)"
	if dropped {
		verdict = "ASSERTIONS DROPPED (see DROPPED above)"
	}
	fmt.Fprintf(w, "\n%d functions before, %d after; %d assertion sites before, %d after\n", nOld, nNew, aOld, aNew)
	fmt.Fprintf(w, "%d moved unchanged, %d renamed unchanged, %d changed, %d gone without assertions\n", moved, renamed, changed, removedNoAsserts)
	fmt.Fprintln(w, verdict)
	return dropped
}

// pick returns the function among same (equal bodies) in dir, else any, else nil.
func pick(same []*fn, dir string) *fn {
	for _, f := range same {
		if f.dir == dir {
			return f
		}
	}
	if len(same) > 0 {
		return same[0]
	}
	return nil
}

func rewrite(m map[string]map[string]string, dir, key string) string {
	if k, ok := m[dir][key]; ok {
		return k
	}
	return key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
