package conformance

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/internal/storetest"
)

// childEnv, when set, makes the test binary a worker of the processes case:
// "<where>\x1f<duration>\x1f<key>,<key>,<key>", one key per real-time strategy.
const childEnv = "RATEMONITOR_CONFORMANCE_CHILD"

const (
	processes4      = 4
	childGoroutines = 8
)

func childMode() bool { return os.Getenv(childEnv) != "" }

// child is one worker process: childGoroutines goroutines per strategy reserve on its key on
// the shared store until the duration ends, sleeping the wait the store tells them, and print
// each grant at once ("G <strategy> <Unix ns> <n>"), so that a worker killed mid-run has
// printed all but the grants in flight.
func child(t *testing.T, tg Target) {
	parts := strings.Split(os.Getenv(childEnv), "\x1f")
	if len(parts) != 3 {
		t.Fatalf("%s=%q: want where, duration and keys", childEnv, os.Getenv(childEnv))
	}
	d, err := time.ParseDuration(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(parts[2], ",")
	st := tg.OpenShared(t, parts[0])
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out sync.Mutex
	var wg sync.WaitGroup
	for i, s := range realStrategies() {
		for range childGoroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					res, err := st.Reserve(ctx, s, keys[i], 1)
					switch {
					case err != nil:
						time.Sleep(5 * time.Millisecond)
					case res.Allowed:
						out.Lock()
						fmt.Fprintf(os.Stdout, "G %d %d 1\n", i, res.At.UnixNano())
						out.Unlock()
					default:
						t := time.NewTimer(res.Wait)
						select {
						case <-t.C:
						case <-ctx.Done():
							t.Stop()
						}
					}
				}
			}()
		}
	}
	wg.Wait()
}

// processes runs 4 OS processes (this test binary again) reserving on one shared store, every
// strategy at once, and kills one halfway. The grants all of them printed are judged at the
// store's instants; the store's usage afterwards must lie between the model's and the model's
// plus the grants the killed one may not have printed; and every key admits again: every wait
// the store tells lies within its longest window, and a grant comes before the longest window
// and liveWithin have passed on the real clock.
func processes(t *testing.T, tg Target) {
	rep := newReport(t, tg)
	defer rep.done()
	where := tg.Shared(t)
	ss := realStrategies()
	keys := make([]string, len(ss))
	for i := range keys {
		keys[i] = newKey("proc")
	}
	d := dur(1500 * time.Millisecond)
	top := strings.SplitN(t.Name(), "/", 2)[0]
	grants := make([][]Grant, len(ss))
	var mu sync.Mutex
	cmds := make([]*exec.Cmd, processes4)
	var wg sync.WaitGroup
	for p := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^"+top+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+where+"\x1f"+d.String()+"\x1f"+strings.Join(keys, ","))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", p, err)
		}
		cmds[p] = cmd
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 4 || f[0] != "G" {
					continue
				}
				i, _ := strconv.Atoi(f[1])
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				if i < 0 || i >= len(ss) {
					continue
				}
				mu.Lock()
				grants[i] = append(grants[i], Grant{At: time.Unix(0, ns), N: 1})
				mu.Unlock()
			}
			err := cmd.Wait()
			if p != 0 && err != nil {
				rep.fail("worker %d: %v\n%s", p, err, stderr.String())
			}
		}()
	}
	time.Sleep(d / 2)
	cmds[0].Process.Kill()
	totals.faults.Add(1)
	wg.Wait()

	st := tg.OpenShared(t, where)
	c := ctx(t)
	total := 0
	for i, s := range ss {
		total += len(grants[i])
		v := rep.violations(s.Name()+": grants of 4 processes at the store's instants", s, grants[i], 0)
		before := time.Now()
		got := storetest.Used(t, st, s, keys[i])
		after := time.Now()
		hi, lo := storetest.ModelUsed(s, grants[i], before), storetest.ModelUsed(s, grants[i], after)
		for r := range got {
			if got[r] < lo[r] || got[r] > hi[r]+childGoroutines {
				rep.fail("%s rule %d: the store counts %d, the model %d to %d (+%d the killed worker may not have printed)", s.Name(), r, got[r], lo[r], hi[r], childGoroutines)
			}
		}
		// No lockout: a caller is admitted within the longest window.
		start := time.Now()
		var waits []time.Duration
		for {
			res, err := st.Reserve(c, s, keys[i], 1)
			if err == nil && res.Allowed {
				break
			}
			if err == nil {
				waits = append(waits, res.Wait)
			}
			if time.Since(start) > s.Longest()+liveWithin {
				rep.fail("%s: not admitted %v after the workers ended (%+v, %v)", s.Name(), time.Since(start), res, err)
				break
			}
			time.Sleep(max(res.Wait, time.Millisecond))
		}
		rep.waitsInBounds(s, waits, 0)
		t.Logf("%s %s, 4 processes (one killed at %v): %d grants (ideal %d), %d violations", tg.Name, s.Name(), d/2, len(grants[i]), ideal(s, d), v)
	}
	_ = total
}

// Where returns, in a worker process of the processes case, what Target.Shared returned in the
// parent (so that a store's test can connect to the parent's server instead of starting one);
// "" otherwise.
func Where() string {
	if !childMode() {
		return ""
	}
	return strings.Split(os.Getenv(childEnv), "\x1f")[0]
}
