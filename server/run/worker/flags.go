package worker

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/judge"
	"github.com/fencelab/fencelab/server/sandbox"
)

// Config is a worker's configuration, from its flags.
type Config struct {
	DatabaseURL string
	Schema      string
	ReceiverURL string // the full URL deliveries are POSTed to
	// ReceiverCredential, if set, goes in every call to the receiver as
	// "Authorization: Bearer …": a run's receiver takes its own workers'
	// calls only. It comes from the environment alone.
	ReceiverCredential string
	Name               string // the owner identity it claims under
	Label              string // the name people see, and its connection's application_name
	Lease              time.Duration
	Heartbeat          time.Duration // 0: a third of the lease; negative: none
	Work               time.Duration // how long the simulated work takes
	Poll               time.Duration // how long to wait when nothing is claimable
	Skew               time.Duration // how far this worker's own clock runs ahead
	Broken             playground.Guards
	Step               bool // wait at each checkpoint for a command
	UntilEmpty         bool // exit when nothing is claimable
	MaxJobs            int  // 0: no limit
	// Delivery is how the result reaches the receiver: called directly,
	// called on a keyed third party after looking the key up, or written to
	// the outbox with the commit.
	Delivery experiments.Delivery
	// SQL, if set, is a reader's own claim, complete and fail, with the
	// run's role to run them as (from the environment alone: see
	// sandbox.WorkerEnv). The worker then connects as that role only,
	// runs no statement of the engine's, and renews no lease.
	SQL *sandbox.WorkerSQL
}

// The environment a worker reads besides DATABASE_URL: what must not be on
// its command line, where every local user can read it.
const (
	EnvReceiverURL        = "FENCELAB_RECEIVER_URL"        // the receiver's deliveries URL (a run's path carries its key)
	EnvReceiverCredential = "FENCELAB_RECEIVER_CREDENTIAL" // this worker's credential at its run's receiver
)

// usagef is a bad flag or value: one line for stderr, exit status 2.
func usagef(format string, a ...any) error {
	return fault.Errorf(fault.Invalid, "fencelab worker: "+format, a...)
}

// ParseFlags parses a worker's command line.
func ParseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	c := Config{}
	fs := flag.NewFlagSet("fencelab worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.DatabaseURL, "database-url", getenv("DATABASE_URL"), "Postgres connection string (default $DATABASE_URL)")
	fs.StringVar(&c.Schema, "schema", judge.DefaultJobsSchema, "the jobs schema")
	fs.StringVar(&c.ReceiverURL, "receiver", getenv(EnvReceiverURL), "the receiver's deliveries URL, e.g. http://127.0.0.1:8081/deliveries (default $"+EnvReceiverURL+")")
	c.ReceiverCredential = getenv(EnvReceiverCredential)
	fs.StringVar(&c.Name, "name", "", "the owner identity this worker claims under (default worker-<pid>)")
	fs.StringVar(&c.Label, "label", "", "the worker's label in events and in its connection's application_name (default: the name)")
	fs.DurationVar(&c.Lease, "lease", 30*time.Second, "lease length")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 0, "lease renewal interval (0: a third of the lease; negative: never renew)")
	fs.DurationVar(&c.Work, "work", 0, "how long the simulated work on each job takes")
	fs.DurationVar(&c.Poll, "poll", 100*time.Millisecond, "how long to wait when no job is claimable")
	fs.DurationVar(&c.Skew, "skew", 0, "how far this worker's own clock runs ahead (matters only with --break db-clock)")
	fs.Var(&c.Broken, "break", "turn a guard off (repeatable): "+strings.Join(guardNames(), ", "))
	fs.BoolVar(&c.Step, "step", false, "wait at each checkpoint (claim, deliver, commit) for a command on stdin")
	fs.BoolVar(&c.UntilEmpty, "until-empty", false, "exit when no job is claimable")
	fs.IntVar(&c.MaxJobs, "max-jobs", 0, "exit after this many jobs (0: no limit)")
	delivery := fs.String("delivery", string(experiments.DeliverDirect), "how the result reaches the receiver: direct, keyed (look the job's key up, then call) or outbox (written with the commit, sent by a relay after it)")
	fs.Usage = func() {} // a parse error is one line, printed by the caller
	help := func() {
		fmt.Fprintf(stderr, "Usage: fencelab worker [flags]\n\nOne worker process: claims jobs, calls the receiver, commits; one JSON event per line on stdout;\nin --step mode it obeys JSON-line commands on stdin: {\"cmd\":\"proceed\"}, {\"cmd\":\"fail\"}, {\"cmd\":\"stop\"}.\nIt exits when its stdin ends: its supervisor is gone.\n\nFlags:\n")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return c, err
		}
		return c, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return c, usagef("unexpected argument %q", fs.Arg(0))
	}
	d, err := experiments.ParseDelivery(*delivery)
	if err != nil {
		return c, usagef("--delivery: %v", err)
	}
	c.Delivery = d
	switch sql, err := sandbox.FromEnv(getenv); {
	case errors.Is(err, sandbox.ErrNoStatements):
	case err != nil:
		return c, usagef("the reader's statements: %v", err)
	default:
		c.SQL = sql
	}
	return c, c.fill()
}

func guardNames() []string {
	var out []string
	for _, g := range playground.AllGuards() {
		out = append(out, g.String())
	}
	return out
}

func (c *Config) fill() error {
	if c.DatabaseURL == "" {
		return usagef("--database-url or DATABASE_URL is required")
	}
	if err := engine.ValidateSchemaName(c.Schema); err != nil {
		return usagef("--schema: %v", err)
	}
	if c.ReceiverURL == "" {
		return usagef("--receiver or $%s is required", EnvReceiverURL)
	}
	if u, err := url.Parse(c.ReceiverURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--receiver is not an http(s) URL")
	}
	if c.Name == "" {
		c.Name = fmt.Sprintf("worker-%d", os.Getpid())
	}
	if err := engine.ValidateOwner(c.Name); err != nil {
		return usagef("--name: %v", err)
	}
	if c.Label == "" {
		c.Label = c.Name
	}
	if err := engine.ValidateOwner(c.Label); err != nil {
		return usagef("--label: %v", err)
	}
	if err := engine.ValidateLease(c.Lease); err != nil {
		return usagef("--lease: %v", err)
	}
	if c.SQL != nil {
		if c.SQL.Schemas.Jobs != c.Schema {
			return usagef("--schema %s is not the schema the reader's statements were checked on", c.Schema)
		}
		if c.Delivery == experiments.DeliverOutbox {
			return usagef("--delivery outbox: a reader's complete writes no outbox")
		}
		c.Heartbeat = -1 // a reader's solution has no renewal statement
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.Lease / 3
	}
	if c.Heartbeat > 0 && c.Heartbeat < 5*time.Millisecond {
		return usagef("--heartbeat %v is too short (at least 5ms)", c.Heartbeat)
	}
	if c.Work < 0 || c.Work > time.Hour {
		return usagef("--work %v must be between 0 and 1h", c.Work)
	}
	if c.Poll < time.Millisecond || c.Poll > time.Minute {
		return usagef("--poll %v must be between 1ms and 1m", c.Poll)
	}
	if c.Skew < -experiments.MaxSkew || c.Skew > experiments.MaxSkew {
		return usagef("--skew %v must be within ±%v", c.Skew, experiments.MaxSkew)
	}
	if c.MaxJobs < 0 {
		return usagef("--max-jobs %d is negative", c.MaxJobs)
	}
	return nil
}
