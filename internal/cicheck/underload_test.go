package cicheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is the script's output, read by the test while the script writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// underLoad runs .ci/under-load with args, and returns it unstarted with its output buffer.
func underLoad(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", ".ci", "under-load"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{p}, args...)...)
	out := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	// A process the script left behind keeps the output open; Wait gives up on it after this.
	cmd.WaitDelay = 10 * time.Second
	return cmd, out
}

var (
	loopPIDs = regexp.MustCompile(`busy loops \(PIDs ([0-9 ]+)\)`)
	childPID = regexp.MustCompile(`child ([0-9]+)`)
)

// loopsOf returns the busy loops' PIDs the script printed.
func loopsOf(t *testing.T, out string) []int {
	t.Helper()
	m := loopPIDs.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no busy loop PIDs in the output:\n%s", out)
	}
	var pids []int
	for _, f := range strings.Fields(m[1]) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, n)
	}
	return pids
}

// alive reports whether pid is a live process (a zombie is not: it has stopped).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// TestUnderLoadStopsItsLoopsHoweverItEnds: the script's busy loops run while the command runs,
// and are gone once the script has ended: after a pass, after a failure (whose exit status it
// returns, stopping the runs), and when it is stopped by SIGTERM while the command runs.
func TestUnderLoadStopsItsLoopsHoweverItEnds(t *testing.T) {
	for _, c := range []struct {
		name     string
		args     []string
		term     bool
		wantExit int
		wantRuns int
	}{
		{"passes three times", []string{"--times", "3", "--loops", "2", "true"}, false, 0, 3},
		{"counts in base ten", []string{"--times", "08", "--loops", "1", "true"}, false, 0, 8},
		{"fails on the first run", []string{"--times", "3", "--loops", "2", "false"}, false, 1, 1},
		{"stopped by SIGTERM", []string{"--loops", "2", "sleep", "600"}, true, 143, 0},
		// As go test is: a command whose own child (the test binary) must stop too.
		{"stopped by SIGTERM with a child", []string{"--loops", "1", "sh", "-c", "sleep 600 & echo child $!; wait"}, true, 143, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd, out := underLoad(t, c.args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if c.term {
				deadline := time.Now().Add(30 * time.Second)
				for !loopPIDs.MatchString(out.String()) || (strings.Contains(c.name, "child") && !childPID.MatchString(out.String())) {
					if time.Now().After(deadline) {
						t.Fatalf("the script printed no loops in 30 s:\n%s", out)
					}
					time.Sleep(10 * time.Millisecond)
				}
				for _, pid := range loopsOf(t, out.String()) {
					if !alive(pid) {
						t.Errorf("busy loop %d is not running while the command runs", pid)
					}
				}
				cmd.Process.Signal(syscall.SIGTERM)
			}
			err := cmd.Wait()
			code := 0
			if errors.Is(err, exec.ErrWaitDelay) {
				t.Errorf("a process the script started kept its output open after it ended")
			} else if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantExit {
				t.Errorf("exit status %d, want %d:\n%s", code, c.wantExit, out)
			}
			if runs := strings.Count(out.String(), "under-load: run "); runs != c.wantRuns {
				t.Errorf("%d runs reported, want %d:\n%s", runs, c.wantRuns, out)
			}
			for _, pid := range loopsOf(t, out.String()) {
				if alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("busy loop %d still runs after the script ended", pid)
				}
			}
			if m := childPID.FindStringSubmatch(out.String()); m != nil {
				pid, _ := strconv.Atoi(m[1])
				// The child may take a moment to act on its SIGTERM once the script has ended.
				deadline := time.Now().Add(10 * time.Second)
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("the command's child %d still runs after the script ended", pid)
				}
			}
		})
	}
}

// TestUnderLoadRefusesBadArguments: no command, an unknown option, an option without its value
// or a count that is not a whole number of at least 1 is a usage error (exit 2) that starts
// nothing.
func TestUnderLoadRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--times", "x", "true"},
		{"--times", "0", "true"},
		{"--times", "", "true"},
		{"--loops", "", "true"},
		{"--loops", "0", "true"},
		{"--times"},
		{"--frobnicate", "true"},
	} {
		cmd, out := underLoad(t, args...)
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || strings.Contains(out.String(), "busy loops") {
			t.Errorf("under-load %v: %v, want exit status 2 and no loops started:\n%s", args, err, out)
		}
	}
}

// TestUnderLoadGivesTheCommandItsInput: the command reads the script's standard input, as it
// would if run without the script.
func TestUnderLoadGivesTheCommandItsInput(t *testing.T) {
	cmd, out := underLoad(t, "--loops", "1", "sh", "-c", "read line; echo read: $line")
	cmd.Stdin = strings.NewReader("the input\n")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !strings.Contains(out.String(), "read: the input") {
		t.Errorf("the command did not read the script's input:\n%s", out)
	}
}
