package ratemonitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/clock"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/headers"
	"github.com/ratemonitor/ratemonitor/internal/credential"
	"github.com/ratemonitor/ratemonitor/internal/headerparse"
	"github.com/ratemonitor/ratemonitor/internal/lograte"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Defaults of SyncConfig.
const (
	defaultFallbackPause = 60 * time.Second
	defaultMaxPause      = 24 * time.Hour
)

// SyncConfig says how a Transport learns from the upstream's responses (WithSync). Its zero
// value gives the defaults.
type SyncConfig struct {
	// Readers turn a response's header into figures per rule (package headers). Default:
	// headers.XeroReader(time.Minute, 24*time.Hour) and headers.IETFReader, and with
	// XRateLimitWindow set, headers.XRateLimitReader(XRateLimitWindow, XRateLimitReset) too.
	// Every window a reader given here declares (headers.Windowed) must be a rule's: New fails
	// otherwise, naming the reader's window and the rules there are. The default Xero and IETF
	// readers are not checked: they read what they find for whichever rules there are.
	Readers []headers.Reader
	// XRateLimitWindow is the window of the limit an upstream's X-RateLimit-Limit, -Remaining
	// and -Reset fields are about (they do not say it): an hour at GitHub. Set, it adds
	// headers.XRateLimitReader to the default readers, and New fails unless a rule of the
	// request's key has that window. Zero (the default) reads no X-RateLimit-* fields, unless
	// Readers has a reader of them. With Readers given, New fails when it is set: list
	// headers.XRateLimitReader among the Readers instead.
	XRateLimitWindow time.Duration
	// XRateLimitReset says how X-RateLimit-Reset is written (default headers.ResetAuto; GitHub
	// writes epoch seconds: headers.ResetEpoch).
	XRateLimitReset headers.ResetMode
	// Fallback is how long a 429 without a usable Retry-After pauses the key (default 60 s).
	Fallback time.Duration
	// MaxPause caps every pause (default 24 h, at most strategy.MaxWindow), so that a wild
	// Retry-After cannot stop a key for years. It does not shorten the reset that dates a raise
	// (that stays the upstream's, up to strategy.MaxWindow).
	MaxPause time.Duration
	// Fixed names the windows the upstream counts in fixed windows of its own (Xero's day),
	// each with how long to wait between probes while its reset is unknown (0: a minute). A
	// figure with a reset frees the rule at that reset; a used-up one without lets one
	// request through per probe interval; see docs/sync.md#fixed-windows. Each window must be
	// a rule's or a meter's: New fails otherwise.
	Fixed map[time.Duration]time.Duration

	// nap is the shortest probe interval of Fixed (0: none): see fixedNap.
	nap time.Duration

	// FirstAnswer is how many requests on a key whose state is unknown (no answer read for it
	// here, nothing in the store) a paced Transport sends before the first answer is read; the
	// others wait for it (their context bounds the wait), then are paced on what it said.
	// Default 1; negative: no gate. Monitoring mode never waits. See
	// docs/pacing.md#the-first-answer-before-the-rush.
	FirstAnswer int

	// checked says, per reader, whether New checks its declared windows against the rules.
	checked []bool
	// xrlAt is 1 + the index of the reader XRateLimitWindow added (0: none), for errors.
	xrlAt int

	// dateWarn rate-limits the warnings about an implausible Date (one per Transport: WithSync
	// makes it). A pointer, so that SyncConfig stays a plain value to copy.
	dateWarn *lograte.Limiter

	// learn is what a Transport made without rules learns (learn.go); nil with rules.
	learn *learner
}

// WithSync makes the Transport feed what the upstream says back into the store, for the
// request's key, after every response. A 429, a 403 about a rate limit (headers.Refused) or a
// 503 with Retry-After pauses the key until the Retry-After (RFC 9110 §10.2.3) has passed, or
// until the reset of a limit the response says is used up, else for SyncConfig.Fallback; every
// Transport sharing the store waits the pause out. A remaining count below ours raises our
// usage of the rule with that window; it never lowers it. New fails when a reader declares a
// window no rule has, or when the store is not a cache.Syncer (the memory and Redis stores
// are); a store error while syncing goes to the error handler and the logger.
// See docs/sync.md#what-withsync-does-with-an-answer.
func WithSync(given SyncConfig) Option {
	return func(t *Transport) error {
		// A copy per New: an Option is a value the caller may pass to any number of New calls,
		// and the defaults filled in below depend on the other options of this one.
		cfg := given
		if cfg.Fallback < 0 || cfg.MaxPause < 0 || cfg.MaxPause > strategy.MaxWindow {
			return fmt.Errorf("ratemonitor: WithSync: Fallback %v must not be negative, and MaxPause %v must be from 0 (the default) to %v",
				cfg.Fallback, cfg.MaxPause, strategy.MaxWindow)
		}
		if cfg.Fallback == 0 {
			cfg.Fallback = defaultFallbackPause
		}
		if cfg.MaxPause == 0 {
			cfg.MaxPause = defaultMaxPause
		}
		if cfg.XRateLimitWindow < 0 {
			return fmt.Errorf("ratemonitor: WithSync: XRateLimitWindow %v is negative", cfg.XRateLimitWindow)
		}
		if cfg.Readers != nil && cfg.XRateLimitWindow > 0 {
			return fmt.Errorf("ratemonitor: WithSync: XRateLimitWindow %v is only read with the default readers, and Readers is given: add headers.XRateLimitReader(%v, mode) to Readers instead",
				cfg.XRateLimitWindow, cfg.XRateLimitWindow)
		}
		if cfg.Readers == nil {
			cfg.Readers = []headers.Reader{headers.XeroReader(time.Minute, 24*time.Hour), headers.IETFReader}
			cfg.checked = []bool{false, false}
			if cfg.XRateLimitWindow > 0 {
				cfg.Readers = append(cfg.Readers, headers.XRateLimitReader(cfg.XRateLimitWindow, cfg.XRateLimitReset))
				cfg.checked = append(cfg.checked, true)
				cfg.xrlAt = len(cfg.Readers)
			}
		} else {
			cfg.Readers = append([]headers.Reader(nil), cfg.Readers...)
			cfg.checked = make([]bool, len(cfg.Readers))
			for i := range cfg.checked {
				cfg.checked[i] = true
			}
		}
		for i, r := range cfg.Readers {
			if r == nil || isNilPointer(r) || isNilFunc(r) {
				return fmt.Errorf("ratemonitor: WithSync: reader %d is nil", i)
			}
		}
		if err := checkFixed(&cfg); err != nil {
			return err
		}
		cfg.dateWarn = new(lograte.Limiter)
		t.sync = &cfg
		return nil
	}
}

// MaxPause returns the longest pause the Transport takes from an upstream: SyncConfig.MaxPause
// with WithSync, 24 h without. Package retry caps Retry-After with it.
func (t *Transport) MaxPause() time.Duration {
	if t.sync == nil {
		return defaultMaxPause
	}
	return t.sync.MaxPause
}

// send passes req to base and, with WithCostReport, corrects the charge ch (nil: the attempt
// was not charged here) to the cost the response reports; with WithSync, it learns from the
// response.
func (t *Transport) send(base http.RoundTripper, req *http.Request, key string, ch *charge) (*http.Response, error) {
	resp, err := base.RoundTrip(req)
	if err == nil && resp != nil && t.obs != nil && resp.StatusCode == http.StatusTooManyRequests {
		t.obs.Observe(observe.Event{Kind: observe.TooManyRequests, Key: key})
	}
	if err != nil || resp == nil {
		return resp, err
	}
	var extra cost.Report
	if t.costs.report != nil {
		extra = t.costed(req, key, resp, ch)
	}
	if t.sync != nil {
		t.learn(req, key, resp, extra)
	}
	return resp, err
}

// wallNow reads the wall clock that header fields are read against under clock.Real (a
// variable so that a test can have it stepped since the process started).
var wallNow = time.Now

// headerNow returns the instant header fields are read against, for a response that arrived
// at now on the Transport's clock.
//
// Header fields carry wall-clock instants (HTTP-dates, epoch resets): read them against the
// wall clock. clock.Real is the wall time at process start plus the monotonic time since, so
// after a step of the wall clock (NTP setting a clock that started wrong, as on a board without
// a real-time clock) it stays off by the step for the life of the process; a correct Date would
// then look skewed, and every HTTP-date wait be off by the step.
func (t *Transport) headerNow(now time.Time) time.Time {
	if sameClock(t.clock, clock.Real()) {
		return wallNow()
	}
	return now
}

// learn applies what resp says to key and to the app key; extra is what WithCostReport's
// reader read from it beyond the readers' figures (signals, and a pause of the key).
func (t *Transport) learn(req *http.Request, key string, resp *http.Response, extra cost.Report) {
	// now, the Transport's clock, is read only for what needs it: the Paused events, and the
	// header fields' instant when that is not the wall clock (headerNow).
	wall := sameClock(t.clock, clock.Real())
	var now time.Time
	if t.obs != nil || !wall {
		now = t.clock.Now()
	}
	hnow := now
	if wall {
		hnow = wallNow()
	}
	var keyUp, appUp engine.Update
	am := t.appMeter()
	app := false
	// the latest reset of a limit the response says is used up, per key
	var keyReset, appReset time.Duration
	take := func(sig headers.Signal) {
		switch {
		case sig.App && am == nil:
		case sig.App:
			appUp.Reports = t.addReport(appUp.Reports, am.strat, sig)
			if sig.Remaining == 0 {
				appReset = max(appReset, sig.Reset)
			}
		default:
			keyUp.Reports = t.addReport(keyUp.Reports, t.strat, sig)
			if sig.Remaining == 0 {
				keyReset = max(keyReset, sig.Reset)
			}
		}
	}
	for _, read := range t.sync.Readers {
		rep := read.Read(resp.Header, hnow)
		app = app || rep.App
		for _, sig := range rep.Signals {
			take(sig)
		}
	}
	for _, sig := range extra.Signals {
		take(sig)
	}
	keyReset = max(keyReset, extra.Pause)
	app = app && am != nil
	// Parsed once here for the pause and the report; the readers (Xero's problem) read the
	// same field the same way.
	ra := headerparse.ParseRetryAfter(resp.Header, hnow)
	if ra.DateIgnored {
		t.dateSkewed(req, key, ra, hnow)
	}
	retry, refused := retryPause(resp, ra)
	if app {
		appReset = max(appReset, retry)
	} else {
		keyReset = max(keyReset, retry)
	}
	// A 429 that gives no time at all pauses whoever it was about for the fallback.
	if refused && !app && keyReset <= 0 {
		keyReset = t.sync.Fallback
	}
	if refused && app && appReset <= 0 {
		appReset = t.sync.Fallback
	}
	keyReset = max(keyReset, t.probeWait(t.strat, keyUp.Reports))
	if am != nil {
		appReset = max(appReset, t.probeWait(am.strat, appUp.Reports))
	}
	keyUp.Pause = min(max(0, keyReset), t.sync.MaxPause)
	appUp.Pause = min(max(0, appReset), t.sync.MaxPause)
	t.keep(req, key, now, keyUp, am, appUp)
}

// keep stores what a response to req said, keyUp on key and appUp on the app meter am's key,
// and reports the pauses (now: the Transport's clock, read when there is an observer).
func (t *Transport) keep(req *http.Request, key string, now time.Time, keyUp engine.Update, am *meter, appUp engine.Update) {
	keySync := keyUp.Pause > 0 || len(keyUp.Reports) > 0
	appSync := am != nil && (appUp.Pause > 0 || len(appUp.Reports) > 0)
	if !keySync && !appSync {
		return // the response said nothing about the limits: nothing to keep
	}
	syncer := t.store.(cache.Syncer)
	ctx := context.WithoutCancel(req.Context()) // the response has arrived: record what it said
	if keySync {
		if err := syncer.Sync(ctx, t.strat, key, keyUp); err != nil {
			t.syncFailed(req, key, err)
		} else if keyUp.Pause > 0 && t.obs != nil {
			t.obs.Observe(observe.Event{Kind: observe.Paused, Key: key, Until: now.Add(keyUp.Pause)})
		}
	}
	if appSync {
		if err := syncer.Sync(ctx, am.strat, am.key, appUp); err != nil {
			t.syncFailed(req, am.key, err)
		} else if appUp.Pause > 0 && t.obs != nil {
			t.obs.Observe(observe.Event{Kind: observe.Paused, Key: am.key, Until: now.Add(appUp.Pause)})
		}
	}
}

// retryPause returns the pause resp's Retry-After (ra, as read) asks for on a refusal
// (headers.Refused: a 429, or a 403 about a rate limit) or a 503 (0 when it has none), and
// whether resp is a refusal.
func retryPause(resp *http.Response, ra headerparse.RetryAfterField) (time.Duration, bool) {
	refused := headers.Refused(resp.StatusCode, resp.Header)
	if !refused && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	return ra.Wait, refused
}

// dateSkewed reports a response to req whose Date was too far from now (the wall clock, or the Transport's injected clock)
// to measure its HTTP-date Retry-After from: the upstream's clock, or whatever sets its Date,
// needs fixing, and until it is, its Retry-After may be off as well.
func (t *Transport) dateSkewed(req *http.Request, key string, ra headerparse.RetryAfterField, now time.Time) {
	skew := ra.Date.Sub(now)
	level, suppressed := t.warnLevel(t.sync.dateWarn)
	t.logger.LogAttrs(req.Context(), level,
		"ratemonitor: the upstream's Date is more than "+headers.MaxDateSkew.String()+" from our clock; its Retry-After is measured from our clock instead. Check the upstream's clock (or ours)",
		slog.String("key", key), slog.String("request", req.Method+" "+credential.URL(req.URL)),
		slog.String("date", ra.Date.UTC().Format(time.RFC3339)), slog.Duration("skew", skew),
		slog.Duration("retry_after", ra.Wait), slog.Int64("suppressed", suppressed))
	if t.obs != nil {
		t.obs.Observe(observe.Event{Kind: observe.SkewedDate, Key: key, Wait: skew})
	}
}

// addReport turns sig into a report on the first rule of s with sig's window, replacing an
// earlier report on that rule (two readers may see the same figure). Signals no rule matches
// are dropped.
func (t *Transport) addReport(reports []engine.Report, s *engine.Strategy, sig headers.Signal) []engine.Report {
	for i := range s.NumRules() {
		r := s.Rule(i)
		if r.Window != sig.Window {
			continue
		}
		// Used is counted from the larger of the two limits: a larger upstream limit (a plan
		// above the rule's) keeps the upstream's usage; a smaller one (Shopify lowering a
		// bucket, an unauthenticated GitHub caller's 60) leaves us exactly the upstream's
		// remaining, not its usage counted against our larger rule.
		limit := r.Limit
		if sig.Limit != headers.Unknown && sig.Limit > limit {
			limit = sig.Limit
		}
		rep := engine.Report{Rule: i, Remaining: min(sig.Remaining, 1<<31), Used: min(max(0, limit-sig.Remaining), 1<<31)}
		switch {
		case sig.Reset == 0:
			rep.Used = 0 // the usage reported is already freed: nothing to raise
		case sig.Reset > 0:
			rep.Reset = min(sig.Reset, strategy.MaxWindow)
		}
		t.markFixed(&rep, r, sig)
		for j := range reports {
			if reports[j].Rule == i {
				// Two readers may give figures for one rule: keep the higher usage.
				if rep.Used > reports[j].Used {
					reports[j] = rep
				}
				return reports
			}
		}
		return append(reports, rep)
	}
	return reports
}

func (t *Transport) syncFailed(req *http.Request, key string, err error) {
	level, suppressed := t.warnLevel(&t.fail.syncWarn)
	t.logger.LogAttrs(req.Context(), level, "ratemonitor: could not store what the upstream said",
		slog.String("key", key), slog.String("request", req.Method+" "+credential.URL(req.URL)), slog.Any("error", err),
		slog.Int64("suppressed", suppressed))
	if t.fail.onError != nil {
		t.fail.onError(req, key, err)
	}
}

// Status is a read-only view of one key for dashboards, in the store's time (Redis TIME with
// the Redis store).
type Status struct {
	// Key is the key: the request's, or a meter's key for it (in Meters).
	Key string
	// Meter names the meter the status is of; "" for the request's own rules.
	Meter string
	// Rules holds usage and remaining per rule, in rule order, with the last remaining count
	// the upstream reported (Usage.Reported, when Usage.ReportedAt is not zero).
	Rules []strategy.Usage
	// PausedUntil is when a pause the upstream asked for ends; zero when not paused.
	PausedUntil time.Time
	// Wait is how long until one more request fits every rule and the pause has ended: with
	// meters, the longest of this key's wait and the meters' (each in Meters), as WaitTime says.
	Wait time.Duration
	// Meters holds the status of each meter's key for this key, in the order of the meters
	// (WithMeter, WithAppRules); nil without meters.
	Meters []Status
}

// Status returns key's usage, remaining and reported figures per rule, its pause, and the same
// on each meter: for a Transport made without rules, on each meter it learned for key or was
// given by SetMeter (no Rules of its own). It records nothing. Errors come from the store.
func (t *Transport) Status(ctx context.Context, key string) (Status, error) {
	if t.strat == nil {
		if t.learning() != nil {
			return t.learnedStatus(ctx, key) // learn.go
		}
		return Status{}, ErrNotConfigured
	}
	st, err := t.status(ctx, t.strat, key)
	for _, m := range t.meters {
		if err != nil {
			return st, err
		}
		var ms Status
		mk := m.keyFor(key)
		if mk == "" {
			return st, meterKeyErr(m, key)
		}
		ms, err = t.status(ctx, m.strat, mk)
		ms.Meter = m.name
		st.Meters = append(st.Meters, ms)
		st.Wait = max(st.Wait, ms.Wait)
	}
	return st, err
}

func (t *Transport) status(ctx context.Context, s *engine.Strategy, key string) (Status, error) {
	snap, err := t.store.Peek(ctx, s, key, 1)
	if err != nil {
		return Status{Key: key}, err
	}
	return Status{Key: key, Rules: snap.Usage, PausedUntil: snap.PausedUntil, Wait: snap.Wait}, nil
}

// errNoSyncer is returned by New for WithSync over a store that cannot keep what upstreams say.
var errNoSyncer = errors.New("ratemonitor: WithSync: the store does not implement cache.Syncer: use one that does (the memory and Redis stores do)")
