package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
)

// frameWriter cancels its context once it has been written n frames (one Write each).
type frameWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	n      int
	cancel context.CancelFunc
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if w.writes == w.n {
		w.cancel()
	}
	return w.buf.Write(p)
}

// TestWatchPrintsFrameEveryInterval: watch prints the status at once and then every --interval
// (50 ms), as tables a blank line apart or as JSON lines, until its context ends. Four frames
// take at least 150 ms: a bound on the real clock that load cannot break (watch's ticker never
// ticks early; a busy machine only makes the frames later).
func TestWatchPrintsFrameEveryInterval(t *testing.T) {
	s := must(rollingwindow.New(rule(60, time.Hour)))
	url := sqliteWith(t, s, "tenant-1", 7)
	for _, jsonOut := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		w := &frameWriter{n: 4, cancel: cancel}
		args := []string{"watch", "--interval", "50ms", "--store", url, "--rule", "60/1h", "tenant-1"}
		if jsonOut {
			args = append(args, "--json")
		}
		var errw bytes.Buffer
		start := time.Now()
		code := run(ctx, args, w, &errw)
		cancel()
		out := w.buf.String()
		if code != 0 || errw.Len() != 0 {
			t.Fatalf("exit %d: %s", code, errw.String())
		}
		if took := time.Since(start); took < 150*time.Millisecond {
			t.Errorf("4 frames 50 ms apart in %v", took)
		}
		if jsonOut {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 4 {
				t.Fatalf("%d lines:\n%s", len(lines), out)
			}
			for _, l := range lines {
				var rep report
				if err := json.Unmarshal([]byte(l), &rep); err != nil || rep.Rules[0].Used != 7 {
					t.Errorf("%v: %s", err, l)
				}
			}
			continue
		}
		frames := regexp.MustCompile(`every 50ms, \d\d:\d\d:\d\d\.\d{3} \(Ctrl-C to stop\)\n`).Split(out, -1)
		if len(frames) != 5 || frames[0] != "" {
			t.Fatalf("want 4 frames:\n%s", out)
		}
		table := fmt.Sprintf("key \"tenant-1\", rollingwindow, %s\nRULE       USED  REMAINING  WAIT FOR 1\n60/1h0m0s  7     53         0s\nall rules: wait 0s for 1 more; not paused\n", url)
		for i, f := range frames[1:] {
			if i < 3 {
				table += "\n" // a blank line between frames
			}
			if f != table {
				t.Errorf("frame %d:\n%q\nwant\n%q", i, f, table)
			}
			table = strings.TrimSuffix(table, "\n\n") + "\n"
		}
	}
}

// TestBinaryStatusAndWatchStopsOnSIGINT builds the command and runs it as a process: status, and
// watch stopped by SIGINT.
func TestBinaryStatusAndWatchStopsOnSIGINT(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ratemonitor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := must(fixedwindow.New(rule(100, 24*time.Hour)))
	url := sqliteWith(t, s, "key:alice", 5)
	out, err := exec.Command(bin, "status", "--strategy", "fixedwindow", "--store", url, "--rule", "100/24h", "--header-key", "alice").Output()
	want := fmt.Sprintf("key \"key:alice\", fixedwindow, %s\nRULE         USED  REMAINING  WAIT FOR 1\n100/24h0m0s  5     95         0s\nall rules: wait 0s for 1 more; not paused\n", url)
	if err != nil || string(out) != want {
		t.Errorf("%v\n%s\nwant\n%s", err, out, want)
	}

	cmd := exec.Command(bin, "status", "--store", url, "--rule", "60per1m", "k")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 || stderr.String() != "ratemonitor: --rule: invalid rule \"60per1m\": want LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s\n" {
		t.Errorf("malformed rule: %v, %q", err, stderr.String())
	}

	cmd = exec.Command(bin, "watch", "--interval", "50ms", "--strategy", "fixedwindow", "--store", url, "--rule", "100/24h", "key:alice")
	var stdout syncBuffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(stdout.String(), "Ctrl-C") < 3; {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no 3 frames in 10 s:\n%s", stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	if err != nil || !strings.Contains(stdout.String(), "100/24h0m0s  5     95         0s\n") {
		t.Errorf("watch after SIGINT: %v\n%s", err, stdout.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
