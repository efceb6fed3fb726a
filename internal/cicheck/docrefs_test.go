package cicheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docRef is a page of docs/ named in a Go comment, with its anchor if any.
var docRef = regexp.MustCompile(`docs/([a-z0-9-]+\.md)(#[a-z0-9-]+)?`)

// brief is a citation of the design brief (spelled so that this file does not match it).
var brief = regexp.MustCompile(`DESIGN( §|[.]md)`)

// TestGoCommentsCiteOnlyDocumentsInTheRepository: every docs/ page a Go file names exists, with
// the heading its anchor names, and no file cites the design brief, which is not in
// the repository: a reader must be able to open what a comment sends them to.
func TestGoCommentsCiteOnlyDocumentsInTheRepository(t *testing.T) {
	root := filepath.Join("..", "..")
	anchors := map[string]map[string]bool{} // page → its headings' anchors
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if brief.Match(b) {
			t.Errorf("%s cites the design brief, which is not in the repository: cite the docs/ page that says it", rel)
		}
		for _, m := range docRef.FindAllStringSubmatch(string(b), -1) {
			page, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if anchors[page] == nil {
				anchors[page] = headingAnchors(filepath.Join(root, "docs", page))
			}
			switch {
			case len(anchors[page]) == 0:
				t.Errorf("%s names docs/%s, which does not exist", rel, page)
			case anchor != "" && !anchors[page][anchor]:
				t.Errorf("%s names docs/%s#%s, a heading that page does not have", rel, page, anchor)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(anchors) == 0 {
		t.Fatal("no Go file names a docs/ page: the walk found nothing")
	}
}

// headingAnchors returns the GitHub anchors of the headings of the Markdown file at path, or nil
// when it does not exist.
func headingAnchors(path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]bool{"": true}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var a strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				a.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				a.WriteRune(r)
			}
		}
		out[a.String()] = true
	}
	return out
}
