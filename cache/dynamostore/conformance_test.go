package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/cache/dynamostore/dynalitetest"
	"github.com/ratemonitor/ratemonitor/cache/dynamostore/internal/dynalite"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/internal/storetest/conformance"
)

// restartable is a dynalite on a fixed port that the suite can stop and start again (empty:
// dynalite keeps its tables in memory, so Start creates the table again).
type restartable struct {
	t                   testing.TB
	bin, port, endpoint string
	cmd                 *exec.Cmd
	out                 *dynalite.SyncBuffer // dynalite's output, for when it dies
	done                chan struct{}        // closed when the process has exited
	exited              error                // its exit status, once done is closed
	dead                atomic.Int64         // times dynalite exited without being stopped
}

// start starts dynalite and creates the table. A dynalite that exits while starting (seen once
// under -race on a loaded machine: exit status 1 right after answering, nothing printed) is
// started again, up to three times.
func (d *restartable) start(t testing.TB) {
	var err error
	for range 3 {
		if err = d.startOnce(); err == nil {
			return
		}
		d.stop()
	}
	t.Fatalf("dynalite on %s: %v\n%s", d.endpoint, err, d.out)
}

func (d *restartable) startOnce() error {
	d.cmd = dynalite.Command(d.t, d.bin, d.port)
	out := &dynalite.SyncBuffer{}
	d.out = out
	d.cmd.Stdout, d.cmd.Stderr = out, out
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.bin, err)
	}
	cmd, done := d.cmd, make(chan struct{})
	d.done = done
	go func() {
		err := cmd.Wait()
		d.exited = err
		close(done)
	}()
	// Ready when it says itself that it listens: the port may answer for another package's
	// server that took it meanwhile, and ours then exits (EADDRINUSE).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(out.String(), dynalite.Listening) {
			break
		}
		if ok, exit := d.alive(); !ok {
			return fmt.Errorf("exited while starting (%v)", exit)
		}
		if time.Now().After(deadline) {
			return errors.New("did not say it listens within 15 s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateTable(ctx, dynalite.NewClient(d.endpoint), "ratelimits"); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	return nil
}

func (d *restartable) stop() {
	if d.cmd != nil && d.cmd.Process != nil {
		select {
		case <-d.done:
			d.dead.Add(1) // it had died by itself
		default:
			d.cmd.Process.Kill()
			<-d.done
		}
		d.cmd = nil
	}
}

// alive reports whether dynalite is still running, and how it exited when not.
func (d *restartable) alive() (bool, error) {
	if d.cmd == nil {
		return false, nil
	}
	select {
	case <-d.done:
		return false, d.exited
	default:
		return true, nil
	}
}

// TestConformance runs the conformance suite (internal/storetest/conformance) on the DynamoDB
// store over dynalite: contention, monitoring, middleware admissions, clock steps
// (Options.Clock), the paced Transport, and dynalite stopped and restarted under SendUncounted and
// SendNothing.
func TestConformance(t *testing.T) {
	dynalitetest.Start(t).Stop() // skips, or fails under RATEMONITOR_REQUIRE_DYNAMODB=1, without dynalite
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	d := &restartable{t: t, bin: dynalite.Find(), port: port, endpoint: "http://127.0.0.1:" + port}
	d.start(t)
	t.Cleanup(func() {
		if ok, err := d.alive(); !ok || t.Failed() {
			t.Logf("dynalite alive at the end: %v (exit: %v); it died by itself %d times; its last output:\n%s", ok, err, d.dead.Load(), d.out)
		}
		d.stop()
	})
	conformance.Run(t, conformance.Target{
		Name: "dynamodb",
		Open: func(t testing.TB, clk clock.Clock) conformance.Store {
			c := dynalite.NewClient(d.endpoint)
			return newStore(t, c, Options{Clock: clk})
		},
		Slow:  12,
		Stop:  func(testing.TB) { d.stop() },
		Start: d.start,
	})
}
