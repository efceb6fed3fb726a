package profiles

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/ratemonitor/ratemonitor"
	"github.com/ratemonitor/ratemonitor/cost"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Profile is an API's limits and how its answers are read, as a value: read it, change a
// figure (another plan, a scaled-down test), add or drop a meter, then pass Options() to
// ratemonitor.New. Each field is the ratemonitor option of the same name; a zero field sets
// nothing (docs/profiles.md#change-a-profile).
type Profile struct {
	// Name names the profile in New's errors ("profiles.Xero").
	Name string
	// Key is the request's key (WithKeyFunc).
	Key ratemonitor.KeyFunc
	// Rules are the request's own limits, one count per key (WithRules), kept by Algorithm:
	// nil for rolling windows, or a strategy's constructor such as tokenbucket.New.
	Rules     []strategy.Rule
	Algorithm func(rules ...strategy.Rule) (*engine.Strategy, error)
	// Cost is what a request costs on Rules before it is sent (WithCost; nil: 1), and
	// CostReport how its answer corrects that (WithCostReport).
	Cost       func(*http.Request) int
	CostReport cost.Reader
	// Meters are the limits kept besides Rules (WithMeter), in order.
	Meters []ratemonitor.Meter
	// InFlight is the most requests of one key in progress at once (WithInFlight; 0: no cap).
	InFlight int
	// Sync says how the upstream's answers are read (WithSync; nil: they are not).
	Sync *ratemonitor.SyncConfig
	// Pacing makes requests wait for room (WithPacing).
	Pacing bool

	err error // the constructor's arguments were wrong: Options makes New fail with it
}

// Options returns the options that set p up, for ratemonitor.New. An error in p is returned by
// New: an option's, named after p.Name; one New finds across options, naming what clashes.
func (p Profile) Options() []ratemonitor.Option {
	if p.err != nil {
		return []ratemonitor.Option{func(*ratemonitor.Transport) error { return p.err }}
	}
	var opts []ratemonitor.Option
	if p.Algorithm != nil {
		s, err := p.Algorithm(p.Rules...)
		if err != nil {
			return Profile{err: fmt.Errorf("ratemonitor/profiles: %s: %w", p.Name, err)}.Options()
		}
		opts = append(opts, ratemonitor.WithStrategy(s))
	} else if len(p.Rules) > 0 {
		opts = append(opts, ratemonitor.WithRules(p.Rules...))
	}
	if p.Key != nil {
		opts = append(opts, ratemonitor.WithKeyFunc(p.Key))
	}
	for _, m := range p.Meters {
		opts = append(opts, ratemonitor.WithMeter(m))
	}
	if p.Cost != nil {
		opts = append(opts, ratemonitor.WithCost(p.Cost))
	}
	if p.CostReport != nil {
		opts = append(opts, ratemonitor.WithCostReport(p.CostReport))
	}
	if p.InFlight != 0 {
		opts = append(opts, ratemonitor.WithInFlight(p.InFlight))
	}
	if p.Sync != nil {
		sc := *p.Sync
		sc.Readers = slices.Clone(sc.Readers)
		opts = append(opts, ratemonitor.WithSync(sc))
	}
	if p.Pacing {
		opts = append(opts, ratemonitor.WithPacing())
	}
	for i, o := range opts { // name the profile in what New says is wrong
		opts[i] = func(t *ratemonitor.Transport) error {
			if err := o(t); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
			return nil
		}
	}
	return opts
}

// Meter returns a copy of the profile's meter named name (its Rules too: changing it changes
// nothing in p until SetMeter), and false when it has none.
func (p Profile) Meter(name string) (ratemonitor.Meter, bool) {
	for _, m := range p.Meters {
		if m.Name == name {
			m.Rules = slices.Clone(m.Rules)
			return m, true
		}
	}
	return ratemonitor.Meter{}, false
}

// SetMeter puts m in the profile in place of its meter of m's name, or adds it after the
// others when it has none.
func (p *Profile) SetMeter(m ratemonitor.Meter) {
	for i := range p.Meters {
		if p.Meters[i].Name == m.Name {
			p.Meters[i] = m
			return
		}
	}
	p.Meters = append(p.Meters, m)
}

// failed is a profile whose arguments are wrong: New fails with the error.
func failed(name, format string, args ...any) Profile {
	return Profile{Name: name, err: fmt.Errorf("ratemonitor/profiles: "+format, args...)}
}
