package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ratemonitor/ratemonitor/fixedwindow"
	"github.com/ratemonitor/ratemonitor/rollingwindow"
	"github.com/ratemonitor/ratemonitor/strategy"
	"github.com/ratemonitor/ratemonitor/strategy/engine"
	"github.com/ratemonitor/ratemonitor/tokenbucket"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

const usageText = `usage:
  ratemonitor status --store URL --rule LIMIT/WINDOW [--rule ...] [flags] KEY
  ratemonitor watch  --store URL --rule LIMIT/WINDOW [--rule ...] [--interval 1s] [flags] KEY

status prints, per rule, the requests that count now, what remains and the wait for one more
request, then the wait under all rules and the key's pause; it counts nothing. watch prints
the same every --interval until interrupted.

stores (--store):
  redis://[user:password@]host:port[/db]             the Redis store (--prefix: its key prefix)
  sqlite:///path/to/limits.db                        an existing SQLite file (sqlite://rel.db: relative)
  dynamodb+http://127.0.0.1:8000?table=ratemonitor   DynamoDB's API at that endpoint (dynalite, DynamoDB Local)
  dynamodb+https://dynamodb.eu-west-1.amazonaws.com?table=ratemonitor
                                                     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION)

KEY is the raw store key: what a Transport's KeyFunc returns (a Xero tenant id, a host), or
the middleware's "key:V" (--header-key V; with --key-header NAME for a credential header, or
--key-secret-env VAR for WithKeySecret, the hashed key:hmac:… the middleware uses) or
"ip:ADDRESS". Rules, margin and granularity must
be those the key is counted under.

rules: LIMIT/WINDOW[,granularity=D][,margin=D][,headroom=N], e.g. 60/1m or 5000/24h,granularity=10s

prefixes (--prefix, Redis): ` + examplePrefixes + `

exit status: 0 ok, 1 the store failed, 2 a usage error, 3 (status) nothing recorded for KEY
under these rules: no counter, or all its requests expired (a wrong KEY, --prefix, --rule or
--strategy, or an idle key)

flags:
`

// usageError is an error in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// config is a parsed command line.
type config struct {
	cmd         string
	store       string
	strat       *engine.Strategy
	newStrategy func(...strategy.Rule) (*engine.Strategy, error)
	rules       []strategy.Rule
	key         string
	prefix      string
	json        bool
	interval    time.Duration
	timeout     time.Duration
	granularity time.Duration
	margin      time.Duration
	headroom    int
	keyHeader   string // --key-header: the middleware's WithKeyHeader, for --header-key
	secretEnv   string // --key-secret-env: the variable holding the middleware's WithKeySecret
}

// run is the command: args without the program name. It returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "ratemonitor:", err)
		return exitUsage
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "ratemonitor:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitRuntime
	}
	defer st.close()
	if cfg.cmd == "watch" {
		err = watch(ctx, cfg, st, stdout)
	} else {
		err = status(ctx, cfg, st, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ratemonitor:", err)
		var ne *nothingError
		if errors.As(err, &ne) {
			return exitNothing
		}
		return exitRuntime
	}
	return exitOK
}

// parse reads the subcommand, its flags (before or after KEY) and KEY.
func parse(args []string, stderr io.Writer) (*config, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return nil, usagef("want a command: status or watch")
	}
	cfg := &config{cmd: args[0]}
	switch cfg.cmd {
	case "status", "watch":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usageText)
		fs := newFlags(&config{}, new([]string), new(string), new(string))
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return nil, flag.ErrHelp
	default:
		return nil, usagef("unknown command %q: want status or watch (ratemonitor -h lists the flags)", cfg.cmd)
	}
	var ruleArgs []string
	var strat, headerKey string
	fs := newFlags(cfg, &ruleArgs, &strat, &headerKey)
	fs.SetOutput(io.Discard) // run prints the error once; -h prints the usage below
	fs.Usage = func() {}
	var keys []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, usageText)
				fs.SetOutput(stderr)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, usagef("%s: %v (ratemonitor -h lists the flags)", cfg.cmd, err)
		}
		if fs.NArg() == 0 {
			break
		}
		keys = append(keys, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	switch {
	case cfg.store == "":
		return nil, usagef("%s: --store is required, e.g. --store redis://127.0.0.1:6379", cfg.cmd)
	case len(ruleArgs) == 0:
		return nil, usagef("%s: at least one --rule is required, e.g. --rule 60/1m", cfg.cmd)
	case headerKey != "" && len(keys) > 0:
		return nil, usagef("%s: give KEY or --header-key, not both", cfg.cmd)
	case headerKey != "":
		key, err := headerStoreKey(headerKey, cfg.keyHeader, cfg.secretEnv)
		if err != nil {
			return nil, err
		}
		cfg.key = key
	case cfg.keyHeader != "" || cfg.secretEnv != "":
		return nil, usagef("%s: --key-header and --key-secret-env go with --header-key V", cfg.cmd)
	case len(keys) == 0:
		return nil, usagef("%s: missing KEY: the store key, e.g. tenant-1, key:alice or ip:203.0.113.7 (or --header-key V)", cfg.cmd)
	case len(keys) > 1:
		return nil, usagef("%s: want one KEY, got %d: %q", cfg.cmd, len(keys), keys)
	case keys[0] == "":
		return nil, usagef("%s: KEY is empty", cfg.cmd)
	default:
		cfg.key = keys[0]
	}
	if cfg.interval <= 0 {
		return nil, usagef("--interval %v: want a positive duration", cfg.interval)
	}
	if cfg.timeout <= 0 {
		return nil, usagef("--timeout %v: want a positive duration", cfg.timeout)
	}
	switch strat {
	case "rollingwindow":
		cfg.newStrategy = rollingwindow.New
	case "fixedwindow":
		cfg.newStrategy = fixedwindow.New
	case "tokenbucket":
		cfg.newStrategy = tokenbucket.New
	default:
		return nil, usagef("--strategy %q: want rollingwindow, fixedwindow or tokenbucket", strat)
	}
	if cfg.granularity != 0 && strat != "rollingwindow" {
		return nil, usagef("--granularity applies to the rolling window only (the %s ignores it)", strat)
	}
	for _, a := range ruleArgs {
		r, err := parseRule(a, cfg)
		if err != nil {
			return nil, err
		}
		if r.Granularity != 0 && strat != "rollingwindow" {
			return nil, usagef("--rule %s: granularity applies to the rolling window only", a)
		}
		cfg.rules = append(cfg.rules, r)
	}
	s, err := cfg.newStrategy(cfg.rules...)
	if err != nil {
		return nil, usagef("--rule: %v", err)
	}
	cfg.strat = s
	return cfg, nil
}

func newFlags(cfg *config, rules *[]string, strat, headerKey *string) *flag.FlagSet {
	fs := flag.NewFlagSet("ratemonitor "+cfg.cmd, flag.ContinueOnError)
	fs.StringVar(&cfg.store, "store", "", "the store, a `URL`: redis://host:port, sqlite:///path.db or dynamodb+http(s)://endpoint?table=T")
	fs.StringVar(strat, "strategy", "rollingwindow", "rollingwindow, fixedwindow or tokenbucket")
	fs.Func("rule", "a rule the key is counted under, `LIMIT/WINDOW`[,granularity=D][,margin=D][,headroom=N]; repeat for layered rules", func(v string) error {
		*rules = append(*rules, v)
		return nil
	})
	fs.DurationVar(&cfg.granularity, "granularity", 0, "rolling window: bucket width of every rule that sets none or 0 (default, strategy.DefaultGranularityFor: the largest whole second count that divides Window+Margin and is at most max(1s, (Window+Margin)/60), e.g. 1s up to 1m, 10s for 10m, 24m for 24h, 24m1s for 24h with a 1m margin)")
	fs.DurationVar(&cfg.margin, "margin", 0, "margin of every rule that sets none or 0 (Rule.Margin)")
	fs.IntVar(&cfg.headroom, "headroom", 0, "headroom of every rule that sets none or 0 (Rule.Headroom)")
	fs.StringVar(&cfg.prefix, "prefix", "", "Redis: the store's key prefix (default "+strconv.Quote("ratemonitor")+")")
	fs.StringVar(headerKey, "header-key", "", "inspect the middleware's key for the key-header value `V` (\"key:\"+V, or \"key:\"+its hash with --key-header naming a credential header or --key-secret-env) instead of KEY")
	fs.StringVar(&cfg.keyHeader, "key-header", "", "with --header-key: the middleware's key header `NAME` (WithKeyHeader); a credential header's values are hashed, as Limiter.HeaderKey does")
	fs.StringVar(&cfg.secretEnv, "key-secret-env", "", "with --header-key: the environment `VARIABLE` holding the middleware's WithKeySecret (hashes any header's values; never give the secret on the command line)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON (watch: one object per line)")
	fs.DurationVar(&cfg.interval, "interval", time.Second, "watch: time between refreshes")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "bound on connecting and on each refresh")
	return fs
}

// parseRule reads one --rule with strategy.ParseRule, the library's parser (one syntax for
// both), then gives the --granularity, --margin and --headroom defaults to the fields the rule
// leaves zero. The granularity fit is checked later, by the strategy's New.
func parseRule(a string, cfg *config) (strategy.Rule, error) {
	r, err := strategy.ParseRule(a)
	if err != nil {
		return strategy.Rule{}, usagef("--rule: %v", err)
	}
	if r.Granularity == 0 {
		r.Granularity = cfg.granularity
	}
	if r.Margin == 0 {
		r.Margin = cfg.margin
	}
	if r.Headroom == 0 {
		r.Headroom = cfg.headroom
	}
	return r, nil
}
