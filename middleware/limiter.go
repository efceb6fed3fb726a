package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/ratemonitor/ratemonitor/cache"
	"github.com/ratemonitor/ratemonitor/internal/contend"
	"github.com/ratemonitor/ratemonitor/observe"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
)

// Limiter decides each request with a strategy kept in a store. Make one with New; it is safe
// for concurrent use, and one Limiter may wrap several handlers (they then share their keys'
// allocations).
type Limiter struct {
	store       cache.Admitter
	peek        cache.Store
	strat       *engine.Strategy
	names       []string
	members     []string // names serialized as RFC 9651 Strings
	policy      string   // the RateLimit-Policy field's value
	keys        *keyer
	onErr       OutagePolicy
	onError     func(*http.Request, error)
	problemType string
	instance    func(*http.Request) string
	obs         observe.Observer
	ruleNames   []string       // the rules' String(), for observer events
	turns       *contend.Turns // per-key turns over a store that contends, else nil
}

// New returns a Limiter over store for the rules of s. store must implement cache.Admitter
// (cache.Memory, the SQLite and the Redis stores do) and accept s (cache.Traits.Validate); the
// store is not closed by the Limiter. New returns an error for a nil store or strategy, a store
// that cannot admit, a strategy the store refuses or that cannot admit one request, and invalid
// options.
func New(store cache.Store, s *engine.Strategy, opts ...Option) (*Limiter, error) {
	if isNil(store) {
		return nil, errors.New("ratemonitor: middleware: nil store")
	}
	if s == nil {
		return nil, errors.New("ratemonitor: middleware: nil strategy")
	}
	adm, ok := store.(cache.Admitter)
	if !ok {
		return nil, fmt.Errorf("ratemonitor: middleware: store %T does not implement cache.Admitter", store)
	}
	var traits cache.Traits // the zero Traits of a store that says nothing of itself
	if d, ok := store.(cache.Describer); ok {
		traits = d.Describe()
	}
	if v := traits.Validate; v != nil {
		if err := v(s); err != nil {
			return nil, err // the store's error says which store and rule
		}
	}
	if err := s.CheckBurst(1); err != nil {
		return nil, fmt.Errorf("ratemonitor: middleware: %w", err)
	}
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.policy != Reject && c.policy != Admit {
		return nil, fmt.Errorf("ratemonitor: middleware: WithOutagePolicy(%d): unknown policy: want Reject or Admit", c.policy)
	}
	keys, err := newKeyer(&c)
	if err != nil {
		return nil, err
	}
	rules := s.Rules()
	names, policy, members, err := policyOf(rules, c.names)
	if err != nil {
		return nil, err
	}
	// Last of the checks, so that a New that fails claims nothing. A store without a Sharing
	// is not checked.
	if sh := traits.Sharing; sh != nil {
		if err := sh.Claim("", s); err != nil {
			return nil, err // it names the rules and what to do
		}
	}
	l := &Limiter{store: adm, peek: store, strat: s, names: names, members: members, policy: policy,
		keys:  keys,
		onErr: c.policy, onError: c.onError, problemType: c.problemType, instance: c.instance}
	if c.observer != nil && !isNil(c.observer) {
		l.obs = c.observer
		for _, r := range rules {
			l.ruleNames = append(l.ruleNames, r.String())
		}
	}
	if traits.Contends {
		l.turns = &contend.Turns{}
	}
	if l.problemType == "" {
		l.problemType = "about:blank"
	}
	if l.instance == nil {
		l.instance = func(r *http.Request) string { return r.URL.EscapedPath() }
	}
	return l, nil
}

// isNil reports whether v is nil or holds a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Wrap returns a handler that decides each request before next sees it (see the package
// comment). The RateLimit fields are set on the response before next is called.
func (l *Limiter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := l.keys.key(r)
		if err != nil {
			l.report(r, err)
			writeProblem(w, l.problem(r, http.StatusInternalServerError,
				"The server cannot tell which rate limit this request counts against."), -1)
			return
		}
		d, err := l.admit(r.Context(), key)
		if err != nil && r.Context().Err() != nil && errors.Is(err, cache.ErrContended) {
			// the store stayed contended until the request's context ended: not an outage,
			// never served uncounted, but said, since the client may still be there
			l.report(r, fmt.Errorf("ratemonitor: middleware: %w", err))
			writeProblem(w, l.problem(r, http.StatusServiceUnavailable,
				"The rate limiter could not decide in time; retry shortly."), 1)
			return
		}
		if err != nil && r.Context().Err() != nil {
			// the client has gone (or the server is shutting down): not a store failure,
			// and never a reason to run the handler uncounted
			writeProblem(w, l.problem(r, http.StatusServiceUnavailable, "The request was cancelled."), -1)
			return
		}
		if err != nil {
			l.report(r, fmt.Errorf("ratemonitor: middleware: store: %w", err))
			if l.onErr == Admit {
				next.ServeHTTP(w, r)
				return
			}
			writeProblem(w, l.problem(r, http.StatusServiceUnavailable,
				"The rate limiter is unavailable; retry shortly."), 1)
			return
		}
		l.setRateLimit(w.Header(), d)
		if l.obs != nil {
			l.observe(key, d)
		}
		if d.Allowed {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admissionKey{}, Admission{Key: key, Decision: d})))
			return
		}
		retry := seconds(d.RetryAfter)
		p := l.problem(r, http.StatusTooManyRequests, l.refusal(d, retry))
		p.Type = l.problemType
		writeProblem(w, p, retry)
	})
}

// admit decides one request on key. Over a store that contends (cache.Traits.Contends), the
// requests on one key take turns. Contention (cache.ErrContended: the store lost an
// optimistic race on the key and recorded nothing) is not an outage: it is tried again within
// ctx, and never reaches the OutagePolicy.
func (l *Limiter) admit(ctx context.Context, key string) (strategy.Decision, error) {
	if l.turns != nil {
		// A store that contends: this server's requests on key take turns, rather than
		// race each other for the key's item.
		leave, err := l.turns.Take(ctx, key)
		if err != nil {
			return strategy.Decision{}, err
		}
		defer leave()
	}
	d, err := l.store.Admit(ctx, l.strat, key, 1)
	if err != nil && errors.Is(err, cache.ErrContended) {
		d, err = contend.Retry(ctx, err, func() (strategy.Decision, error) { return l.store.Admit(ctx, l.strat, key, 1) })
	}
	return d, err
}

// observe sends the decision d on key to the observer.
func (l *Limiter) observe(key string, d strategy.Decision) {
	e := observe.Event{Kind: observe.Rejected, Key: key, N: 1, Wait: d.RetryAfter, Rules: make([]observe.RuleUsage, len(d.Rules))}
	if d.Allowed {
		e.Kind = observe.Admitted
	}
	for i, st := range d.Rules {
		e.Rules[i] = observe.RuleUsage{Rule: l.ruleNames[i], Used: st.Used, Limit: st.Rule.EffectiveLimit()}
	}
	l.obs.Observe(e)
}

func (l *Limiter) report(r *http.Request, err error) {
	if l.onError != nil {
		l.onError(r, err)
	}
}

// refusal explains a refusal: the rules that have nothing left, and when to retry.
func (l *Limiter) refusal(d strategy.Decision, retry int64) string {
	var used []string
	for i, st := range d.Rules {
		if st.Remaining < 1 {
			used = append(used, strconv.Quote(l.names[i])+" ("+strconv.Itoa(st.Rule.EffectiveLimit())+
				" per "+windowText(st.Rule.EffectiveWindow())+")")
		}
	}
	var b strings.Builder
	switch len(used) {
	case 0:
		b.WriteString("The request exceeds the rate limit")
	case 1:
		b.WriteString("Rate limit " + used[0] + " is used up")
	default:
		b.WriteString("Rate limits " + strings.Join(used, ", ") + " are used up")
	}
	fmt.Fprintf(&b, "; retry after %d s.", retry)
	return b.String()
}

// policyOf returns the names of rules (given, or made up), the RateLimit-Policy field that
// describes them, and the names as members of the RateLimit field; or an error for a rule whose
// limit the field cannot carry, or names that are not keys (RFC 9651).
func policyOf(rules []strategy.Rule, given []string) (names []string, policy string, members []string, err error) {
	for _, r := range rules {
		if r.EffectiveLimit() > maxSFInteger {
			return nil, "", nil, fmt.Errorf("ratemonitor: middleware: rule %s: a limit of %d cannot be sent in RateLimit-Policy, whose integers have at most 15 digits (RFC 9651)",
				r, r.EffectiveLimit())
		}
	}
	if names, err = policyNames(rules, given); err != nil {
		return nil, "", nil, err
	}
	if policy, err = policyField(rules, names); err != nil {
		return nil, "", nil, fmt.Errorf("ratemonitor: middleware: policy names: %w", err)
	}
	if members, err = memberNames(names); err != nil {
		return nil, "", nil, fmt.Errorf("ratemonitor: middleware: policy names: %w", err)
	}
	return names, policy, members, nil
}
