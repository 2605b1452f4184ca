package experiments

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
)

// Ordering names a scenario: who reaches the receiver first, or what else
// goes wrong.
type Ordering string

// The scenarios. The first two are the article's: in both, B is still
// working when A wakes up. The others show what the status check alone
// catches (B already done), a crash, and a skewed clock.
const (
	NewOwnerFirst     Ordering = "new-owner-first"
	ZombieFirst       Ordering = "zombie-first"
	OwnerDoneFirst    Ordering = "owner-done-first"
	CrashBeforeCommit Ordering = "crash-before-commit"
	ClockSkew         Ordering = "clock-skew"
	// FreePlay has no script: a person adds jobs and workers and pauses,
	// resumes and kills workers at will. Only the playground server runs it.
	FreePlay Ordering = "free-play"
)

// Orderings lists every scripted scenario in a stable order.
func Orderings() []Ordering {
	return []Ordering{NewOwnerFirst, ZombieFirst, OwnerDoneFirst, CrashBeforeCommit, ClockSkew}
}

// ParseOrdering parses a scenario name, free-play included.
func ParseOrdering(s string) (Ordering, error) {
	var names []string
	for _, o := range append(Orderings(), FreePlay) {
		if string(o) == s {
			return o, nil
		}
		names = append(names, string(o))
	}
	return "", fault.Invalidf("unknown ordering %q (want one of %s)", s, strings.Join(names, ", "))
}

// The two workers of every scenario. A claims first and becomes the zombie;
// B takes the job over.
const (
	Zombie   = "A"
	NewOwner = "B"
)

// Action is one kind of scenario step.
type Action string

// The actions a scenario script is made of.
const (
	// ActClaim lets a worker claim a job; the step ends when the worker waits
	// at its next checkpoint (or reports that nothing was claimable).
	ActClaim Action = "claim"
	// ActDeliver lets a worker call the receiver.
	ActDeliver Action = "deliver"
	// ActCommit lets a worker complete its job in the database.
	ActCommit Action = "commit"
	// ActFreeze stops a worker process with SIGSTOP. With Release, the
	// worker is also let past its checkpoint while frozen, so it wakes in
	// the middle of its next step, never knowing time passed.
	ActFreeze Action = "freeze"
	// ActThaw continues a frozen worker with SIGCONT; the step ends when it
	// has settled at a checkpoint again.
	ActThaw Action = "thaw"
	// ActKill kills a worker process with SIGKILL.
	ActKill Action = "kill"
	// ActAwaitExpiry waits until the job's lease has run out on the
	// database clock.
	ActAwaitExpiry Action = "await-expiry"
)

// Step is one step of a scenario script.
type Step struct {
	Action  Action `json:"action"`
	Worker  string `json:"worker,omitempty"`
	Release bool   `json:"release,omitempty"`
	// Fail, on a commit step: the worker's handler errored, so it reports
	// a failure (its fail statement) instead of completing.
	Fail bool   `json:"fail,omitempty"`
	Say  string `json:"say"`
}

// Scenario is a script of steps for workers A and B over one job.
type Scenario struct {
	Ordering Ordering `json:"ordering"`
	Title    string   `json:"title"`
	Steps    []Step   `json:"steps"`
}

// Script returns the scenario for an ordering.
func Script(o Ordering) (Scenario, error) {
	if _, err := ParseOrdering(string(o)); err != nil {
		return Scenario{}, err
	}
	claimA := Step{Action: ActClaim, Worker: Zombie, Say: "Worker A claims the job: epoch 1, and a lease on the database clock."}
	freezeA := Step{Action: ActFreeze, Worker: Zombie, Release: true,
		Say: "Worker A is about to call the receiver when it freezes (SIGSTOP): a GC pause, a hung call, a closed laptop lid."}
	expire := Step{Action: ActAwaitExpiry, Worker: Zombie, Say: "Worker A's lease runs out on the database clock, and A has no idea."}
	claimB := Step{Action: ActClaim, Worker: NewOwner, Say: "Worker B claims the expired job: the epoch goes up to 2."}
	deliverB := Step{Action: ActDeliver, Worker: NewOwner, Say: "Worker B calls the receiver with epoch 2."}
	commitB := Step{Action: ActCommit, Worker: NewOwner, Say: "Worker B commits with the epoch it holds: 2."}
	thawA := Step{Action: ActThaw, Worker: Zombie, Say: "Worker A wakes up (SIGCONT) and carries on: it calls the receiver with epoch 1, while B is still working."}
	commitA := Step{Action: ActCommit, Worker: Zombie, Say: "Worker A commits with the epoch it still believes it holds, 1, while the row's epoch is 2."}

	s := Scenario{Ordering: o, Title: OrderingWords(o).Title}
	switch o {
	case NewOwnerFirst:
		// B reaches the receiver first; A wakes while B is still working.
		s.Steps = []Step{claimA, freezeA, expire, claimB, deliverB, thawA, commitA, commitB}
	case ZombieFirst:
		s.Steps = []Step{claimA, freezeA, expire, claimB, thawA, commitA, deliverB, commitB}
	case OwnerDoneFirst:
		// B finishes before A wakes: the status check alone refuses A.
		s.Steps = []Step{claimA, freezeA, expire, claimB, deliverB,
			{Action: ActCommit, Worker: NewOwner, Say: "Worker B commits and is done, before A wakes: the job is done at epoch 2."},
			{Action: ActThaw, Worker: Zombie, Say: "Worker A wakes up (SIGCONT) and carries on: it calls the receiver with epoch 1, after B has finished."},
			{Action: ActCommit, Worker: Zombie, Say: "Worker A commits with epoch 1, on a job that is already done."}}
	case CrashBeforeCommit:
		s.Steps = []Step{
			claimA,
			{Action: ActDeliver, Worker: Zombie, Say: "Worker A calls the receiver with epoch 1."},
			{Action: ActKill, Worker: Zombie, Say: "Worker A dies (SIGKILL) before it can commit."},
			{Action: ActAwaitExpiry, Worker: Zombie, Say: "Worker A's lease runs out on the database clock."},
			claimB,
			{Action: ActDeliver, Worker: NewOwner, Say: "Worker B delivers again, with epoch 2: the receiver accepts the newer epoch."},
			commitB,
		}
	case FreePlay:
		s.Steps = []Step{}
	case ClockSkew:
		s.Steps = []Step{
			claimA,
			{Action: ActClaim, Worker: NewOwner, Say: "Worker B, whose own clock runs ahead, looks for a job: by its clock A's lease has already run out."},
			{Action: ActDeliver, Worker: Zombie, Say: "Worker A, healthy and never paused, calls the receiver with epoch 1."},
			{Action: ActCommit, Worker: Zombie, Say: "Worker A commits with epoch 1."},
			{Action: ActDeliver, Worker: NewOwner, Say: "Worker B calls the receiver, if it holds the job."},
			{Action: ActCommit, Worker: NewOwner, Say: "Worker B commits, if it holds the job."},
		}
	}
	return s, nil
}

// ScriptOf returns the scenario a run plays: its ordering's script, with
// worker A's commit a failure when the config says the zombie fails.
func ScriptOf(c RunConfig) (Scenario, error) {
	s, err := Script(c.Ordering)
	if err != nil || !c.ZombieFails {
		return s, err
	}
	steps := make([]Step, len(s.Steps))
	copy(steps, s.Steps)
	for i, st := range steps {
		if st.Action == ActCommit && st.Worker == Zombie {
			steps[i].Fail = true
			steps[i].Say = "Worker A's handler errors after it wakes: it reports a failure with the epoch it still believes it holds, 1, while the row's epoch is 2."
		}
	}
	s.Steps = steps
	return s, nil
}

// Bounds are the least and the most a duration may be. Every lease of
// fencelab is held to a Bounds, and says when it is out of them in the one
// sentence of Check.
type Bounds struct{ Min, Max time.Duration }

// Validate returns an *engine.InputError, "lease 5ms must be between 100ms
// and 1m0s", when d is out of b; what names the setting.
func (b Bounds) Validate(what string, d time.Duration) error {
	if !b.Holds(d) {
		return fault.Invalidf("%s %v must be between %v and %v", what, d, b.Min, b.Max)
	}
	return nil
}

// Holds reports whether d lies inside b.
func (b Bounds) Holds(d time.Duration) bool { return b.Min <= d && d <= b.Max }

// Within reports whether c lies inside b.
func (b Bounds) Within(c Bounds) bool { return b.Min <= c.Min && c.Max <= b.Max && c.Min <= c.Max }

// The leases of fencelab's runs: wider than a person needs and narrow
// enough that a run always ends. A server may narrow RunLease
// (--min-lease, --max-lease); a check's cases each wait for their lease
// to run out, so CheckLease is narrower; the load lab's rounds hold
// thousands of leases, so LoadLease is narrower still.
var (
	RunLease   = Bounds{100 * time.Millisecond, time.Minute}
	CheckLease = Bounds{RunLease.Min, 10 * time.Second}
	LoadLease  = Bounds{200 * time.Millisecond, 2 * time.Second}
)

// MaxSkew bounds a worker's clock skew.
const MaxSkew = time.Hour

// RunConfig is one run of a scenario: the ordering, the guards broken on
// purpose, and the knobs. Validate fills the defaults.
type RunConfig struct {
	Ordering     Ordering          `json:"ordering"`
	Broken       playground.Guards `json:"broken"`
	SameIdentity bool              `json:"same_identity"`
	Lease        time.Duration     `json:"lease"`
	// Skew is how far worker B's own clock runs ahead of the database's.
	// Only the clock-skew scenario uses it; 0 there means twice the lease.
	Skew time.Duration `json:"skew"`
	// Delivery is how the workers' results reach the receiver: called
	// directly before the commit (the default), called on a third party
	// that knows no epochs but deduplicates on a key, or through an outbox.
	Delivery Delivery `json:"delivery"`
	// Custom says the run's workers and receiver run a reader's own
	// statements (a check's case), not the engine's: its guards are
	// whatever those statements keep.
	Custom bool `json:"custom,omitempty"`
	// ZombieFails: worker A's handler errors after it wakes, so it runs
	// its fail, not its complete (ScriptOf). Only the orderings where A
	// wakes after B's claim take it.
	ZombieFails bool `json:"zombie_fails,omitempty"`
}

// Delivery is how a worker's result reaches the external receiver.
type Delivery string

// The deliveries.
const (
	// DeliverDirect: the worker calls the receiver with its epoch, then
	// commits. The receiver keeps the newest epoch per job.
	DeliverDirect Delivery = "direct"
	// DeliverKeyed: the receiver is a third party that knows no epochs. It
	// deduplicates on a stable key (the job's id), and the worker looks the
	// key's state up before it calls: at most one effect per job — though
	// it may be the zombie's.
	DeliverKeyed Delivery = "keyed"
	// DeliverOutbox: the worker writes its delivery to an outbox in the same
	// statement as its compare-and-set commit, and a relay sends it only
	// after the commit: a fenced zombie's effect never happens.
	DeliverOutbox Delivery = "outbox"
)

// Deliveries lists the deliveries in a stable order.
func Deliveries() []Delivery { return []Delivery{DeliverDirect, DeliverKeyed, DeliverOutbox} }

// ParseDelivery parses a delivery name; "" is direct.
func ParseDelivery(s string) (Delivery, error) {
	if s == "" {
		return DeliverDirect, nil
	}
	for _, d := range Deliveries() {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fault.Invalidf("unknown delivery %q (want direct, keyed or outbox)", s)
}

// DefaultRunLease is the lease a run uses unless told otherwise: long enough
// to see, short enough not to wait for.
const DefaultRunLease = time.Second

// DefaultBatchLease is the lease of a batch's runs (the article's Step 5,
// the guard matrix) unless its command says otherwise: they play in the
// background, and only their verdicts are shown.
const DefaultBatchLease = 300 * time.Millisecond

// Validate checks the config and fills its defaults.
func (c *RunConfig) Validate() error {
	if c.Ordering == "" {
		return fault.Invalidf("ordering is required")
	}
	if _, err := ParseOrdering(string(c.Ordering)); err != nil {
		return err
	}
	if !c.Broken.Valid() {
		return fault.Invalidf("unknown guard bits %#x", uint16(c.Broken))
	}
	if c.Lease == 0 {
		c.Lease = DefaultRunLease
	}
	if err := RunLease.Validate("lease", c.Lease); err != nil {
		return err
	}
	if c.Skew < 0 || c.Skew > MaxSkew {
		return fault.Invalidf("skew %v is out of range: it must be between 0 and %v", c.Skew, MaxSkew)
	}
	if c.Ordering == ClockSkew && c.Skew == 0 {
		c.Skew = 2 * c.Lease
	}
	if c.Ordering != ClockSkew && c.Skew != 0 {
		return fault.Invalidf("skew applies only to the %s ordering", ClockSkew)
	}
	if c.ZombieFails && c.Ordering != NewOwnerFirst && c.Ordering != ZombieFirst && c.Ordering != OwnerDoneFirst {
		return fault.Invalidf("the zombie fails only in an ordering where it wakes after the new owner's claim (%s, %s, %s), not %s",
			NewOwnerFirst, ZombieFirst, OwnerDoneFirst, c.Ordering)
	}
	d, err := ParseDelivery(string(c.Delivery))
	if err != nil {
		return err
	}
	c.Delivery = d
	return nil
}

// Owner returns the identity a worker claims under: worker-a and worker-b,
// or worker-a for both when the run gives the new owner the zombie's name.
func (c RunConfig) Owner(label string) string {
	if c.SameIdentity {
		label = Zombie
	}
	return "worker-" + strings.ToLower(label)
}

// WorkerSkew returns how far a worker's own clock runs ahead.
func (c RunConfig) WorkerSkew(label string) time.Duration {
	if label == NewOwner {
		return c.Skew
	}
	return 0
}

// String summarises the run for people.
func (c RunConfig) String() string {
	s := fmt.Sprintf("%s, lease %v, %s", c.Ordering, c.Lease, c.Broken)
	if c.SameIdentity {
		s += ", same identity"
	}
	if c.Skew > 0 {
		s += fmt.Sprintf(", B's clock %v ahead", c.Skew)
	}
	if c.Delivery != "" && c.Delivery != DeliverDirect {
		s += ", delivery " + string(c.Delivery)
	}
	if c.ZombieFails {
		s += ", the zombie fails"
	}
	if c.Custom {
		s += ", the reader's statements"
	}
	return s
}
