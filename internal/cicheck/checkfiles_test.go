package cicheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// script is .ci/check-files, found from this package's directory.
func script(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", ".ci", "check-files"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs check-files in dir and returns its exit status, stdout and stderr.
func run(t *testing.T, dir string) (int, string, string) {
	t.Helper()
	cmd := exec.Command("bash", script(t))
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("check-files: %v", err)
	return 0, "", ""
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// repo makes a git repository in a temporary directory holding files (path → content; a
// path ending in "*" is written executable, the star dropped) and adds them all to the index.
func repo(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	for p, b := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dir, "add", "-A")
	return dir
}

// sized is n bytes starting with head, the rest text.
func sized(head string, n int) []byte {
	return append([]byte(head), bytes.Repeat([]byte("a"), n-len(head))...)
}

// TestCheckFilesNamesEachBuildOutput: each kind of build output is named on its own line, with what to do,
// and the status is 1; a script with the exec bit, a 1 MB file and a 199 KB docs image pass.
func TestCheckFilesNamesEachBuildOutput(t *testing.T) {
	dir := repo(t, map[string][]byte{
		"run*":               []byte("#!/usr/bin/env bash\necho ok\n"),
		"bin/tool":           sized("\x7fELF\x02\x01\x01", 4096), // no exec bit: the bytes count
		"bin/tool.macho":     sized("\xcf\xfa\xed\xfe", 4096),
		"bin/tool.exe":       sized("MZ\x90\x00", 4096),
		"data/big.json":      sized("{", 1_100_000),
		"data/limit.json":    sized("{", 1<<20),
		"docs/shot.png":      sized("\x89PNG", 250_000),
		"docs/ok.png":        sized("\x89PNG", 199_000),
		"images/large.png":   sized("\x89PNG", 900_000), // outside docs/: the 1 MB limit
		"README.md":          []byte("# x\n"),
		"dir with space/a b": []byte("x"),
	})
	code, out, errs := run(t, dir)
	want := "" +
		"check-files: bin/tool: an executable binary (ELF): remove it (git rm --cached 'bin/tool') and add it to .gitignore\n" +
		"check-files: bin/tool.exe: an executable binary (PE): remove it (git rm --cached 'bin/tool.exe') and add it to .gitignore\n" +
		"check-files: bin/tool.macho: an executable binary (Mach-O): remove it (git rm --cached 'bin/tool.macho') and add it to .gitignore\n" +
		"check-files: data/big.json: 1100000 bytes: larger than 1 MB (1048576 bytes); build outputs and data do not belong in git\n" +
		"check-files: docs/shot.png: 250000 bytes: an image under docs/ must be under 200 KB (204800 bytes); shrink it\n"
	if code != 1 || out != "" || errs != want {
		t.Errorf("check-files = %d\nstdout %q\nstderr:\n%s\nwant stderr:\n%s", code, out, errs, want)
	}
}

// TestCheckFilesFailsOnEachFaultAlone: each failure alone fails the check (no failure hides
// behind another).
func TestCheckFilesFailsOnEachFaultAlone(t *testing.T) {
	for name, files := range map[string]map[string][]byte{
		"elf":       {"a.out": sized("\x7fELF", 64)},
		"size":      {"blob.bin": sized("x", 1_100_000)},
		"docsimage": {"docs/a.svg": sized("<svg", 250_000)},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _, errs := run(t, repo(t, files)); code != 1 || strings.Count(errs, "\n") != 1 {
				t.Errorf("%s: check-files = %d, stderr %q; want 1 and one line", name, code, errs)
			}
		})
	}
}

// TestCheckFilesPassesTheRepository: the real repository passes (.ci/run, an executable script, among
// its files).
func TestCheckFilesPassesTheRepository(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(git(t, root, "ls-files", "-s", ".ci/run"), "100755") {
		t.Fatal(".ci/run is not tracked as an executable: the test would not show that scripts pass")
	}
	n := len(strings.Fields(git(t, root, "ls-files")))
	code, out, errs := run(t, root)
	if want := "check-files: " + strconv.Itoa(n) + " tracked files: no binaries, none over 1 MB, docs images under 200 KB\n"; code != 0 || out != want || errs != "" {
		t.Errorf("check-files on the repository = %d\nstdout %q\nstderr %q\nwant stdout %q", code, out, errs, want)
	}
}

// TestGitignoreIgnoresBuildOutputsNotSources: the build outputs of the programs, test binaries, coverage and profiles are
// ignored; sources next to them are not.
func TestGitignoreIgnoresBuildOutputsNotSources(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"ratelimitd", "cmd/ratelimitd/ratelimitd", "ratemonitor", "cmd/ratemonitor/ratemonitor",
		"ratelimitload", "cmd/ratelimitload/ratelimitload", "redisworker", "examples/redisworker/redisworker",
		"xero_example/xero_example", "xero_example.exe", "ratelimitd.exe",
		"middleware.test", "middleware/middleware.test", "ratemonitor.test",
		"coverage.out", "cover.out", "c.out", "coverage.html", "coverage.txt", "coverage/index.html", "profile.cov",
		"cpu.prof", "mem.pprof", "trace.out", "cmd/ratelimitd/ratelimitd.db",
	} {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", p)
		cmd.Dir = root
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not ignored by .gitignore (git check-ignore: %v)", p, err)
		}
	}
	for _, p := range []string{"xero_example/main.go", "cmd/ratelimitd/main.go", "profiles/xero.go", "docs/xero-run.svg", "cache/sqlitestore/schema.sql"} {
		cmd := exec.Command("git", "check-ignore", "-q", "--no-index", p)
		cmd.Dir = root
		if err := cmd.Run(); err == nil {
			t.Errorf("%s, a source file, is ignored by .gitignore", p)
		}
	}
}
