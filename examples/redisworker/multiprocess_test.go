package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratemonitor/ratemonitor/cache/redisstore/redistest"
)

// TestFourProcessesDrawNo429: four OS processes pace 60 requests each for the same two tenants through
// their own Transports, sharing one Redis, against one upstream that strictly enforces 60 per
// 5 s per tenant. The upstream sees no 429 (safety) and accepts every request, once (the
// workers finish within two minutes: liveness). The margin, a second (20 % of the window), is
// sized so that a loaded CI machine, where a request can take hundreds of milliseconds from
// being granted to reaching the upstream, cannot push one over. The throughput, what share of
// the limit's the fleet reached, is logged: a loaded machine gives any figure.
func TestFourProcessesDrawNo429(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	srv := redistest.Start(t)
	const limit, window, margin, procs, each = 60, 5 * time.Second, time.Second, 4, 60
	bin := filepath.Join(t.TempDir(), "redisworker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The upstream runs in a process of its own, built without -race, so that the delay between
	// a worker recording a request and the upstream counting it stays far below the margin.
	upCmd := exec.Command(bin, "-serve", "127.0.0.1:0", "-limit", "60", "-window", window.String())
	upIn, _ := upCmd.StdinPipe()
	upOut, _ := upCmd.StdoutPipe()
	if err := upCmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(upOut)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "listening ") {
		t.Fatalf("upstream did not start: %q", lines.Text())
	}
	upstreamURL := "http://" + strings.TrimPrefix(lines.Text(), "listening ")
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range procs {
		cmd := exec.Command(bin, "-redis", srv.Addr, "-upstream", upstreamURL, "-tenants", "tenant-a,tenant-b",
			"-requests", "60", "-limit", "60", "-window", window.String(), "-margin", margin.String())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	// The workers take about 20 s; past two minutes they are killed, and fail.
	deadline := time.AfterFunc(2*time.Minute, func() {
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
	})
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v\n%s", i, err, outs[i])
		}
	}
	if !deadline.Stop() {
		t.Errorf("the workers did not finish within two minutes")
	}
	upIn.Close()
	var refused int
	type seen struct {
		count       int
		first, last time.Time
	}
	got := map[string]seen{}
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 2 && f[0] == "refused":
			refused, _ = strconv.Atoi(f[1])
		case len(f) == 5 && f[0] == "tenant":
			c, _ := strconv.Atoi(f[2])
			a, _ := strconv.ParseInt(f[3], 10, 64)
			b, _ := strconv.ParseInt(f[4], 10, 64)
			got[f[1]] = seen{c, time.Unix(0, a), time.Unix(0, b)}
		}
	}
	upCmd.Wait()
	if refused != 0 {
		t.Fatalf("the upstream refused %d requests", refused)
	}
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		a := got[tenant]
		if a.count != procs*each {
			t.Fatalf("%s: upstream accepted %d, want %d", tenant, a.count, procs*each)
		}
		// 240 requests at 60 per window need 3 windows after the first burst, each held
		// back by the margin: the best possible span from first to last arrival.
		best := time.Duration((procs*each-1)/limit) * (window + margin)
		span := a.last.Sub(a.first)
		ratio := best.Seconds() / span.Seconds()
		t.Logf("%s: %d requests in %v (best %v): %.1f %% of the limit's throughput with its margin", tenant, a.count, span.Round(time.Millisecond), best, 100*ratio)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
