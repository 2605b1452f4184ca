package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// The load lab: many real worker processes over many jobs, frozen at
// random for longer than their lease, once per queue style. While they
// run, the lab counts from Postgres's records the zombie writes that
// landed (Tally); at the end of each style the invariant checker reads
// every job (CheckLoad), and the two must agree.

// The load lab's bounds: what one request may ask of a public server.
const (
	MaxLoadWorkers   = 16
	MaxLoadJobs      = 5000
	MinLoadLease     = 200 * time.Millisecond
	MaxLoadLease     = 2 * time.Second
	MaxLoadStyleTime = 60 * time.Second // a style still going after this is cut short
)

// LoadConfig says what a load lab runs: how many worker processes, how
// many jobs, the lease, and the queue styles in the order they run.
type LoadConfig struct {
	Workers int      `json:"workers"`
	Jobs    int      `json:"jobs"`
	LeaseMS int64    `json:"lease_ms"`
	Styles  []string `json:"styles"`
}

// LoadStyles are the styles a load lab runs by default: fencelab first,
// then the well-known queues' ways, then leases alone.
func LoadStyles() []string {
	return []string{"fencelab", "state-only", "id-only", "token", "leases-alone"}
}

// DefaultLoad is a load lab that ends in about half a minute on two cores.
func DefaultLoad() LoadConfig {
	return LoadConfig{Workers: 8, Jobs: 500, LeaseMS: 300, Styles: LoadStyles()}
}

// Fill sets every zero field to its default.
func (c *LoadConfig) Fill() {
	d := DefaultLoad()
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if c.Jobs == 0 {
		c.Jobs = d.Jobs
	}
	if c.LeaseMS == 0 {
		c.LeaseMS = d.LeaseMS
	}
	if len(c.Styles) == 0 {
		c.Styles = d.Styles
	}
}

// Lease is the workers' lease.
func (c LoadConfig) Lease() time.Duration { return time.Duration(c.LeaseMS) * time.Millisecond }

// Validate checks a filled config against the lab's bounds.
func (c LoadConfig) Validate() error {
	switch {
	case c.Workers < 2 || c.Workers > MaxLoadWorkers:
		return engine.Invalidf("workers %d must be between 2 and %d", c.Workers, MaxLoadWorkers)
	case c.Jobs < 10 || c.Jobs > MaxLoadJobs:
		return engine.Invalidf("jobs %d must be between 10 and %d", c.Jobs, MaxLoadJobs)
	case c.Lease() < MinLoadLease || c.Lease() > MaxLoadLease:
		return engine.Invalidf("lease %v must be between %v and %v", c.Lease(), MinLoadLease, MaxLoadLease)
	case len(c.Styles) == 0 || len(c.Styles) > len(Styles()):
		return engine.Invalidf("styles: name 1 to %d of %s", len(Styles()), strings.Join(LoadStyles(), ", "))
	}
	seen := map[string]bool{}
	for _, s := range c.Styles {
		if _, err := StyleByName(s); err != nil {
			return err
		}
		if seen[s] {
			return engine.Invalidf("style %q is named twice", s)
		}
		seen[s] = true
	}
	return nil
}

// LoadPhase is where a load lab is.
type LoadPhase string

// The phases, in order; a lab stopped early ends stopped.
const (
	LoadStarted   LoadPhase = "started"    // the lab began: Config says what it runs
	LoadTick      LoadPhase = "tick"       // a style's live counts (Tally), a few times a second
	LoadStyleDone LoadPhase = "style_done" // a style ended: its counts and the checker's (Result)
	LoadFinished  LoadPhase = "finished"   // every style ended: Results and Verdict
	LoadStopped   LoadPhase = "stopped"    // reset, replaced, abandoned or failed: Reason says which
)

// LoadTally is a style's live counts, read from Postgres while its workers
// run.
type LoadTally struct {
	Style     string `json:"style"`
	ElapsedMS int64  `json:"elapsed_ms"` // since the style's workers started
	Jobs      int64  `json:"jobs"`
	Done      int64  `json:"done"`
	Failed    int64  `json:"failed"`
	// PerSecond is jobs done per second since the tick before.
	PerSecond float64 `json:"per_second"`
	// Stalls is how many times a worker was frozen with SIGSTOP so far.
	Stalls int `json:"stalls"`
	// LateRow counts completions and failure reports that landed on a job
	// after another worker had claimed it (the job's history).
	LateRow int64 `json:"late_row"`
	// LateReceiver counts deliveries the receiver took although it held a
	// newer epoch for the job (its decisions).
	LateReceiver int64 `json:"late_receiver"`
}

// LoadCheck is what the invariant checker found, job by job, at the end
// of a style.
type LoadCheck struct {
	Jobs int `json:"jobs"` // checked
	// Broken counts jobs that broke at least one invariant.
	Broken int `json:"broken"`
	// ZombieResult counts jobs that ended with a zombie's result: in the
	// row, at the receiver, or both.
	ZombieResult int `json:"zombie_result"`
	// StaleWrites counts the checker's late completions and failure
	// reports (stale-write, not renewals): LateRow's count, job by job.
	StaleWrites int `json:"stale_writes"`
	// OlderAccepted counts the checker's receiver-monotonic violations:
	// LateReceiver's count, job by job.
	OlderAccepted int `json:"older_accepted"`
	// Unfinished counts jobs that ended neither done nor failed.
	Unfinished int `json:"unfinished"`
	// Example is the sentence of one violation, the plainest found, or "".
	Example string `json:"example"`
}

// LoadStyleResult is one style's end.
type LoadStyleResult struct {
	Style string `json:"style"`
	// Tally is the last live count, taken after the workers stopped.
	Tally LoadTally `json:"tally"`
	Check LoadCheck `json:"check"`
	// PerSecond is jobs done per second over the whole style.
	PerSecond float64 `json:"per_second"`
	// CutShort says the style reached MaxLoadStyleTime with jobs left.
	CutShort bool `json:"cut_short"`
	// Agrees says the live counts and the checker's are the same.
	Agrees bool `json:"agrees"`
}

// LoadEvent is a load lab's progress (actor: runner).
type LoadEvent struct {
	Phase  LoadPhase  `json:"phase"`
	Config LoadConfig `json:"config"`
	// Style is the style a tick or style_done is about.
	Style   string            `json:"style,omitempty"`
	Tally   *LoadTally        `json:"tally,omitempty"`
	Result  *LoadStyleResult  `json:"result,omitempty"`
	Results []LoadStyleResult `json:"results,omitempty"`
	// Verdict says in words what the finished lab showed.
	Verdict string     `json:"verdict,omitempty"`
	Reason  StopReason `json:"reason,omitempty"`
	// Message says why a lab failed.
	Message string `json:"message,omitempty"`
}

// Tally reads a style's live counts from its queue's history and its
// receiver's decisions: three statements, no lock taken.
func Tally(ctx context.Context, db engine.DB, s engine.Schemas) (LoadTally, error) {
	var t LoadTally
	st := engine.JobsTally(s.Jobs)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.Done, &t.Failed, &t.Jobs); err != nil {
		return t, fmt.Errorf("tally the jobs: %w", err)
	}
	st = engine.HistoryLateWrites(s.Jobs)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.LateRow); err != nil {
		return t, fmt.Errorf("tally the late writes: %w", err)
	}
	st = engine.DecisionsOlderAccepted(s.Receiver)
	if err := db.QueryRow(ctx, st.SQL).Scan(&t.LateReceiver); err != nil {
		return t, fmt.Errorf("tally the receiver: %w", err)
	}
	return t, nil
}

// Span reads how long a style's workers took over its jobs, on the
// database clock: from the first claim until every job had ended once.
// Zero if nothing was claimed or nothing ended.
func Span(ctx context.Context, db engine.DB, s engine.Schemas) (time.Duration, error) {
	st := engine.HistorySpan(s.Jobs)
	var from, to *time.Time
	if err := db.QueryRow(ctx, st.SQL).Scan(&from, &to); err != nil {
		return 0, fmt.Errorf("read the style's span: %w", err)
	}
	if from == nil || to == nil || !to.After(*from) {
		return 0, nil
	}
	return to.Sub(*from), nil
}

// CheckLoad runs the invariant checker over every job of a style (up to
// limit), from what Postgres and the receiver recorded.
func CheckLoad(ctx context.Context, q *engine.Queue, r ReceiverView, limit int) (LoadCheck, error) {
	rep, err := ReportJobs(ctx, q, r, limit)
	if err != nil {
		return LoadCheck{}, err
	}
	c := LoadCheck{Jobs: len(rep.Jobs)}
	for _, j := range rep.Jobs {
		if j.Status != engine.StatusDone && j.Status != engine.StatusFailed {
			c.Unfinished++
		}
		if len(j.Violations) > 0 {
			c.Broken++
		}
		zombie := false
		for _, v := range j.Violations {
			switch {
			case v.Invariant == InvRowLastOwner || v.Invariant == InvReceiverLastOwner:
				zombie = true
			case v.Invariant == InvStaleWrite && v.Op != "renew":
				c.StaleWrites++
			case v.Invariant == InvReceiverMonotonic:
				c.OlderAccepted++
			}
		}
		if zombie {
			c.ZombieResult++
		}
	}
	if len(rep.Violations) > 0 {
		c.Example = rep.Violations[0].Text
	}
	return c, nil
}

// LoadVerdict says what a finished load lab showed, from its results: how
// many jobs each style left with a zombie's result, and fencelab's count
// and throughput beside them.
func LoadVerdict(rs []LoadStyleResult) string {
	var parts []string
	var fenced *LoadStyleResult
	var others float64
	n := 0
	for i := range rs {
		r := &rs[i]
		if r.Style == "fencelab" {
			fenced = r
			continue
		}
		others += r.PerSecond
		n++
		if len(parts) == 0 {
			parts = append(parts, fmt.Sprintf("%s: %s of %s jobs ended with a zombie's result", StyleShort(r.Style), count(r.Check.ZombieResult), count(r.Check.Jobs)))
		} else {
			parts = append(parts, fmt.Sprintf("%s: %s", StyleShort(r.Style), count(r.Check.ZombieResult)))
		}
	}
	if fenced != nil {
		s := fmt.Sprintf("fencelab: %s", count(fenced.Check.ZombieResult))
		if len(parts) == 0 {
			s = fmt.Sprintf("fencelab: %s of %s jobs ended with a zombie's result", count(fenced.Check.ZombieResult), count(fenced.Check.Jobs))
		}
		if n > 0 && others > 0 {
			ratio := fenced.PerSecond / (others / float64(n))
			if ratio >= 0.9 && ratio <= 1.1 {
				s += ", at the same throughput"
			} else {
				s += fmt.Sprintf(", at %.2f× their throughput", ratio)
			}
		}
		parts = append(parts, s)
	}
	v := upperFirst(strings.Join(parts, "; ")) + "."
	for _, r := range rs {
		if !r.Agrees {
			v += fmt.Sprintf(" The live counts and the checker's disagree for %s.", StyleShort(r.Style))
		}
		if r.CutShort {
			v += fmt.Sprintf(" %s was cut short at %v with jobs left.", upperFirst(StyleShort(r.Style)), MaxLoadStyleTime)
		}
	}
	return v
}

// count writes n with thousands separated by commas.
func count(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
