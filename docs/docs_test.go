package docs

import (
	"bufio"
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
		if _, ok := regionOf(src, c.want); ok != c.ok {
			t.Errorf("regionOf(%q) = %v, want %v", c.want, ok, c.ok)
		}
	}
}

var (
	buildLine = regexp.MustCompile(`(?m)^//go:build`)
	linkRE    = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	codeRE    = regexp.MustCompile("`[^`]*`")
	slugDrops = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = strings.ReplaceAll(s, "`", "")
	s = slugDrops.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// anchors returns the anchors of a Markdown file's headings (outside code blocks), with
// GitHub's -1, -2 suffixes for repeated ones.
func anchors(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, seen := map[string]bool{}, map[string]int{}
	inCode := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(l, "#") {
			continue
		}
		s := slug(strings.TrimLeft(l, "#"))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out, sc.Err()
}

// links returns the relative link targets of a page with the line each is on, outside code
// blocks and code spans.
func links(path string) ([][2]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	inCode := false
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(l, ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, [2]string{fmt.Sprint(i + 1), target})
		}
	}
	return out, nil
}

// TestLinks: every relative link of the README and docs/*.md names a file that exists and, for
// a Markdown target, a heading that exists in it; every page and image in docs/ is linked
// from a page.
func TestLinks(t *testing.T) {
	shown := map[string]bool{}
	n := 0
	for _, page := range pages(t) {
		ls, err := links(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			n++
			file, anchor, _ := strings.Cut(l[1], "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%s: link %q: %v", page, l[0], l[1], err)
				continue
			}
			abs, _ := filepath.Abs(target)
			if self, _ := filepath.Abs(page); abs != self {
				shown[abs] = true // a page's links to itself do not make it findable
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%s: link %q has an anchor into a file that is not Markdown", page, l[0], l[1])
				continue
			}
			as, err := anchors(target)
			if err != nil {
				t.Fatal(err)
			}
			if !as[anchor] {
				t.Errorf("%s:%s: link %q: %s has no heading with the anchor #%s", page, l[0], l[1], target, anchor)
			}
		}
	}
	if n < 30 {
		t.Errorf("found %d relative links, want at least 30: is the link parser still finding them?", n)
	}
	mds, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range mds {
		abs, _ := filepath.Abs(md)
		if !shown[abs] {
			t.Errorf("docs/%s is linked from no page: a reader cannot find it", md)
		}
	}
	images, err := filepath.Glob("*.[ps][nv]g")
	if err != nil {
		t.Fatal(err)
	}
	if len(images) == 0 {
		t.Fatal("no images found in docs/")
	}
	for _, img := range images {
		abs, _ := filepath.Abs(img)
		if !shown[abs] {
			t.Errorf("docs/%s is shown by no page: link it or remove it", img)
		}
	}
}

// TestSlug: the anchors GitHub makes of this project's kinds of heading.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		" Redis Cluster and Sentinel":           "redis-cluster-and-sentinel",
		" Keys that hold credentials":           "keys-that-hold-credentials",
		" `WithSync`: what the upstream says":   "withsync-what-the-upstream-says",
		" Store down, slow, evicted, restarted": "store-down-slow-evicted-restarted",
		" Modules and what they pull in":        "modules-and-what-they-pull-in",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestREADMEShort: the README teaches the first steps and links the rest; depth belongs in
// docs/ (issue 16: a README that teaches).
func TestREADMEShort(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 200 {
		t.Errorf("README.md has %d lines, want at most 200: move the detail into a page of docs/", n)
	}
}
