package sqlitestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/internal/storetest"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// childEnv, when set, makes the test binary a worker process: "<path>|<strategy>|<requests>".
const childEnv = "RATEMONITOR_SQLITE_CHILD"

// childAt is the instant every worker's clock stands still at, so that no window rolls over
// or refills during the test and the exact count is known.
var childAt = time.Date(2026, 11, 30, 20, 30, 0, 0, time.UTC)

// strategies are the ones the cross-process test runs, each allowing 2500 of the 4000 attempts.
func strategies(name string) (*engine.Strategy, error) {
	r := strategy.Rule{Limit: 2500, Window: time.Hour}
	switch name {
	case "fixedwindow":
		return fixedwindow.New(r)
	case "tokenbucket":
		return tokenbucket.New(r)
	case "rollingwindow":
		return rollingwindow.New(r)
	}
	return nil, fmt.Errorf("unknown strategy %q", name)
}

// child runs one worker: Admit a number of times on the shared file, and print how many were
// admitted.
func child() int {
	parts := strings.Split(os.Getenv(childEnv), "|")
	n, _ := strconv.Atoi(parts[2])
	s, err := strategies(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := Open(context.Background(), parts[0], Options{Clock: clock.NewManual(childAt)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer st.Close()
	admitted := 0
	for range n {
		d, err := st.Admit(context.Background(), s, "shared", 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println(admitted)
	return 0
}

// TestFourProcessesAdmitExactlyLimit: four processes × 1 000 admissions on one file, under each
// strategy: exactly 2 500 admitted and, under the fixed window, exactly 4 000 counted.
func TestFourProcessesAdmitExactlyLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	for _, name := range []string{"fixedwindow", "tokenbucket", "rollingwindow"} {
		t.Run(name, func(t *testing.T) {
			st, path := open(t, Options{Clock: clock.NewManual(childAt)})
			var wg sync.WaitGroup
			outs := make([]bytes.Buffer, 4)
			errs := make([]error, 4)
			for i := range outs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), childEnv+"="+path+"|"+name+"|1000")
					cmd.Stdout = &outs[i]
					var stderr bytes.Buffer
					cmd.Stderr = &stderr
					if errs[i] = cmd.Run(); errs[i] != nil {
						errs[i] = fmt.Errorf("%w: %s", errs[i], stderr.String())
					}
				}()
			}
			wg.Wait()
			admitted := 0
			for i := range outs {
				if errs[i] != nil {
					t.Fatalf("process %d: %v", i, errs[i])
				}
				k, err := strconv.Atoi(strings.TrimSpace(outs[i].String()))
				if err != nil {
					t.Fatalf("process %d printed %q", i, outs[i].String())
				}
				admitted += k
			}
			if admitted != 2500 {
				t.Errorf("admitted %d of 4000, want exactly 2500", admitted)
			}
			s, _ := strategies(name)
			want := 2500
			if name == "fixedwindow" {
				want = 4000 // refused attempts count too
			}
			if u := storetest.Used(t, st, s, "shared"); u[0] != want {
				t.Errorf("used = %d, want %d", u[0], want)
			}
		})
	}
}
