package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// buildLine finds a build constraint: a file that has one is not always compiled.
var buildLine = regexp.MustCompile(`(?m)^//go:build`)

// pages are the Markdown files whose Go blocks and links are checked: the repository's README
// and every page of docs/.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join("..", "README.md")}, files...)
	if len(files) < 2 {
		t.Fatalf("want README.md and docs/*.md, found %v", files)
	}
	return files
}

// block is one fenced code block of a page: its language, the line its first line of code is
// on (1-based), and its lines.
type block struct {
	lang  string
	line  int
	lines []string
}

// blocks returns every fenced block of a Markdown file; an unterminated fence is an error.
func blocks(path string) ([]block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []block
	var cur *block
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 2}
		case cur != nil && strings.TrimSpace(l) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a ``` block is never closed", path, cur.line-1)
	}
	return out, nil
}

// norm makes a line comparable across indentation and gofmt's alignment: the snippet is
// indented by its place in the page, the compiled code by its place in a function, and gofmt
// aligns trailing comments by the lines around them.
func norm(l string) string { return strings.Join(strings.Fields(l), " ") }

// compiled returns the normalized lines of every Go file of this package (the compiler checks
// them all: a build constraint would hide a file from it, so none may have one).
func compiled(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if buildLine.Match(data) {
			t.Fatalf("%s has a build constraint: the docs' code must all be compiled", f)
		}
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			lines = append(lines, norm(l))
		}
		out[f] = lines
	}
	return out
}

// regionOf says which file holds want, line for line, as a contiguous region.
func regionOf(src map[string][]string, want []string) (string, bool) {
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		lines := src[n]
		for i := 0; i+len(want) <= len(lines); i++ {
			if slices.Equal(lines[i:i+len(want)], want) {
				return n, true
			}
		}
	}
	return "", false
}

// TestGoBlocksCompiled: every ```go block of the README and of docs/*.md is, line for line
// (indentation and gofmt's alignment aside), a region of a Go file of this package, which the
// compiler checks; so no snippet shows code that does not build against today's API.
func TestGoBlocksCompiled(t *testing.T) {
	src := compiled(t)
	checked := 0
	for _, page := range pages(t) {
		bs, err := blocks(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if b.lang != "go" {
				continue
			}
			var want []string
			for _, l := range b.lines {
				want = append(want, norm(l))
			}
			for len(want) > 0 && want[len(want)-1] == "" {
				want = want[:len(want)-1]
			}
			if len(want) == 0 {
				t.Errorf("%s:%d: an empty ```go block", page, b.line)
				continue
			}
			if _, ok := regionOf(src, want); !ok {
				t.Errorf("%s:%d: this ```go block is not, line for line, code of docs/*.go (so nothing compiles it); it starts:\n\t%s",
					page, b.line, b.lines[0])
			}
			checked++
		}
	}
	// The README and the pages hold this many Go blocks today; a drop means the parser
	// missed some (a changed fence) rather than that they all passed.
	if checked < 20 {
		t.Errorf("checked %d ```go blocks, want at least 20: is the fence parser still finding them?", checked)
	}
}

// TestRegionOfRefuses: the check fails a block that is not in the code, a reordered one and
// one that only matches across two files, so TestGoBlocksCompiled can fail.
func TestRegionOfRefuses(t *testing.T) {
	src := map[string][]string{"a.go": {"x := 1", "y := 2", "z := 3"}, "b.go": {"w := 4"}}
	for _, c := range []struct {
		want []string
		ok   bool
	}{
		{[]string{"y := 2", "z := 3"}, true},
		{[]string{"z := 3", "y := 2"}, false},
		{[]string{"z := 3", "w := 4"}, false},
		{[]string{"v := 0"}, false},
	} {
		t.Run(strings.Join(c.want, "; "), func(t *testing.T) {
			if _, ok := regionOf(src, c.want); ok != c.ok {
				t.Errorf("regionOf(%q) = %v, want %v", c.want, ok, c.ok)
			}
		})
	}
}

// TestREADMEAtMost200Lines: the README teaches the first steps and links the rest; depth belongs in
// docs/ (issue 16: a README that teaches).
func TestREADMEAtMost200Lines(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 200 {
		t.Errorf("README.md has %d lines, want at most 200: move the detail into a page of docs/", n)
	}
}
