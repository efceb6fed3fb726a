package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// report is one look at a key: the JSON output, and what the table shows.
type report struct {
	Key      string       `json:"key"`
	Store    string       `json:"store"`
	Strategy string       `json:"strategy"`
	At       time.Time    `json:"at"`
	Rules    []ruleReport `json:"rules"`
	// WaitNS is the wait for one more request under every rule (pause included where the
	// store keeps pauses).
	WaitNS      int64      `json:"wait_ns"`
	Wait        string     `json:"wait"`
	PausedUntil *time.Time `json:"paused_until"`
	PauseNS     int64      `json:"pause_ns"`
}

type ruleReport struct {
	Rule          string     `json:"rule"`
	Limit         int        `json:"limit"`
	WindowSeconds float64    `json:"window_seconds"`
	Used          int        `json:"used"`
	Remaining     int        `json:"remaining"`
	WaitNS        int64      `json:"wait_ns"`
	Wait          string     `json:"wait"`
	Reported      *int       `json:"reported,omitempty"`
	ReportedAt    *time.Time `json:"reported_at,omitempty"`
}

// inspect peeks at the key: once under all rules (usage, the overall wait, the pause) and once
// per rule (that rule's wait). Counters are addressed by rule, so a one-rule strategy reads the
// same state. Nothing is counted.
func inspect(ctx context.Context, cfg *config, st *store) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	snap, err := st.Peek(ctx, cfg.strat, cfg.key, 1)
	if err != nil {
		return nil, fmt.Errorf("peek %q in %s: %w", cfg.key, st.name, err)
	}
	now := time.Now()
	rep := &report{Key: cfg.key, Store: st.name, Strategy: cfg.strat.Name(), At: now.UTC(),
		WaitNS: int64(snap.Wait), Wait: human(snap.Wait)}
	if !snap.PausedUntil.IsZero() {
		pu := snap.PausedUntil.UTC()
		rep.PausedUntil = &pu
		rep.PauseNS = int64(max(0, pu.Sub(now)))
	}
	for i, u := range snap.Usage {
		r := cfg.rules[i]
		one, err := cfg.newStrategy(r)
		if err != nil {
			return nil, err // cannot happen: the rule is valid in cfg.strat
		}
		s1, err := st.Peek(ctx, one, cfg.key, 1)
		if err != nil {
			return nil, fmt.Errorf("peek %q in %s: %w", cfg.key, st.name, err)
		}
		rr := ruleReport{Rule: r.String(), Limit: r.Limit, WindowSeconds: r.Window.Seconds(),
			Used: u.Used, Remaining: u.Remaining, WaitNS: int64(s1.Wait), Wait: human(s1.Wait)}
		if !u.ReportedAt.IsZero() {
			n, at := u.Reported, u.ReportedAt.UTC()
			rr.Reported, rr.ReportedAt = &n, &at
		}
		rep.Rules = append(rep.Rules, rr)
	}
	return rep, nil
}

// human rounds d up to the millisecond (never early) for the table.
func human(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// writeTable prints rep as an aligned table.
func writeTable(w io.Writer, rep *report) error {
	fmt.Fprintf(w, "key %q, %s, %s\n", rep.Key, rep.Strategy, rep.Store)
	reported := false
	for _, r := range rep.Rules {
		reported = reported || r.Reported != nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "RULE\tUSED\tREMAINING\tWAIT FOR 1")
	if reported {
		fmt.Fprint(tw, "\tUPSTREAM SAID")
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s", r.Rule, r.Used, r.Remaining, r.Wait)
		if reported {
			said := "-"
			if r.Reported != nil {
				said = fmt.Sprintf("%d remaining at %s", *r.Reported, r.ReportedAt.Format(time.RFC3339))
			}
			fmt.Fprint(tw, "\t"+said)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pause := "not paused"
	if rep.PausedUntil != nil {
		pause = fmt.Sprintf("paused for %s, until %s", human(time.Duration(rep.PauseNS)), rep.PausedUntil.Format("2006-01-02T15:04:05.000Z07:00"))
	}
	_, err := fmt.Fprintf(w, "all rules: wait %s for 1 more; %s\n", rep.Wait, pause)
	return err
}

func status(ctx context.Context, cfg *config, st *store, w io.Writer) error {
	rep, err := inspect(ctx, cfg, st)
	if err != nil {
		return err
	}
	if empty(rep) {
		return nothingFound(cfg, st)
	}
	if cfg.json {
		return writeJSON(w, rep)
	}
	return writeTable(w, rep)
}

func writeJSON(w io.Writer, rep *report) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Terminal control: home the cursor and clear the screen.
const clearScreen = "\x1b[H\x1b[2J"

// watch prints a frame at once and then every cfg.interval until ctx is done, which ends it
// with nil. The first look must succeed (so a wrong store or key fails at once); later
// failures are shown in their frame and the watch goes on. On a terminal each frame replaces
// the last; elsewhere frames follow one another, each under its "every …" header line.
func watch(ctx context.Context, cfg *config, st *store, w io.Writer) error {
	tty := isTerminal(w)
	t := time.NewTicker(cfg.interval)
	defer t.Stop()
	for first := true; ; first = false {
		rep, err := inspect(ctx, cfg, st)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && first {
			return err
		}
		var frame bytes.Buffer
		switch {
		case cfg.json && err != nil:
			b, _ := json.Marshal(map[string]string{"key": cfg.key, "at": time.Now().UTC().Format(time.RFC3339Nano), "error": err.Error()})
			frame.Write(append(b, '\n'))
		case cfg.json:
			writeJSON(&frame, rep)
		default:
			if tty {
				frame.WriteString(clearScreen)
			} else if !first {
				frame.WriteString("\n")
			}
			fmt.Fprintf(&frame, "every %v, %s (Ctrl-C to stop)\n", cfg.interval, time.Now().Format("15:04:05.000"))
			if err != nil {
				fmt.Fprintf(&frame, "error: %v\n", err)
			} else {
				writeTable(&frame, rep)
			}
		}
		if _, err := w.Write(frame.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
