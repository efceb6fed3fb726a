package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
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

// TestRelativeLinksResolve: every relative link of the README and docs/*.md names a file that
// exists and, for a Markdown target, a heading that exists in it; every page and image in docs/ is
// linked from a page.
func TestRelativeLinksResolve(t *testing.T) {
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

// TestSlugIsGitHubAnchor: the anchors GitHub makes of this project's kinds of heading.
func TestSlugIsGitHubAnchor(t *testing.T) {
	for in, want := range map[string]string{
		" Redis Cluster and Sentinel":           "redis-cluster-and-sentinel",
		" Keys that hold credentials":           "keys-that-hold-credentials",
		" `WithSync`: what the upstream says":   "withsync-what-the-upstream-says",
		" Store down, slow, evicted, restarted": "store-down-slow-evicted-restarted",
		" Modules and what they pull in":        "modules-and-what-they-pull-in",
	} {
		t.Run(in, func(t *testing.T) {
			if got := slug(in); got != want {
				t.Errorf("slug(%q) = %q, want %q", in, got, want)
			}
		})
	}
}
