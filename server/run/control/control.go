// Package control decodes the commands that drive a playground session and
// its runs, whether they arrive as an HTTP body or as a WebSocket message.
// A session carries out those that start and end runs; a run carries out
// the rest itself, in line (runner.Run.Do). Decoding
// is strict: unknown fields, fields that do not apply to the action, and
// out-of-range values are refused with one sentence that says what was
// wrong, before anything happens.
package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/fencelab/fencelab/server/wire"
)

// Action names what a command does.
type Action string

// The actions.
const (
	Run          Action = "run"           // start a run: a scripted ordering (auto or step) or free play
	Step         Action = "step"          // play the next step of a scripted run (pausing auto play)
	Pause        Action = "pause"         // pause auto play between steps
	Play         Action = "play"          // resume auto play
	Pace         Action = "pace"          // set the delay between auto steps
	Finish       Action = "finish"        // play the rest of a scripted run at once, or end free play, and give the verdict
	Reset        Action = "reset"         // end the current run: kill its workers, drop its schemas
	PauseWorker  Action = "pause_worker"  // SIGSTOP a worker
	ResumeWorker Action = "resume_worker" // SIGCONT a worker
	KillWorker   Action = "kill_worker"   // SIGKILL a worker
	AddJob       Action = "add_job"       // free play: insert a job
	AddWorker    Action = "add_worker"    // free play: spawn a worker
	Verdict      Action = "verdict"       // free play: check every job now
	Matrix       Action = "matrix"        // run every guard × ordering × identity in the background
	Batch        Action = "batch"         // run one of the article's experiments (or the matrix) in the background
	Load         Action = "load"          // run the load lab: many workers, many jobs, random stalls, once per queue style
	Check        Action = "check"         // check a reader's own four statements: the article's cases, in the background
)

// Command is one decoded command. Only the fields its action takes are set.
type Command struct {
	Action       Action                `json:"action"`
	Ordering     experiments.Ordering  `json:"ordering,omitempty"`
	Mode         protocol.Mode         `json:"mode,omitempty"` // auto | step (scripted runs)
	Broken       []string              `json:"broken,omitempty"`
	Style        string                `json:"style,omitempty"`
	SameIdentity bool                  `json:"same_identity,omitempty"`
	LeaseMS      int64                 `json:"lease_ms,omitempty"`
	SkewMS       int64                 `json:"skew_ms,omitempty"`
	PaceMS       *int64                `json:"pace_ms,omitempty"`
	Worker       string                `json:"worker,omitempty"`
	Delivery     experiments.Delivery  `json:"delivery,omitempty"`
	Name         experiments.BatchName `json:"name,omitempty"`
	WorkMS       int64                 `json:"work_ms,omitempty"`
	Payload      json.RawMessage       `json:"payload,omitempty"`
	Workers      int                   `json:"workers,omitempty"` // load: worker processes
	Jobs         int                   `json:"jobs,omitempty"`    // load: jobs per style
	Styles       []string              `json:"styles,omitempty"`  // load: the queue styles, in order
	// Solution (check) is the reader's four statements.
	Solution *sandbox.Solution `json:"solution,omitempty"`
}

// Limits bound what a command may ask for.
type Limits struct {
	MinLease time.Duration
	MaxLease time.Duration
	MaxPace  time.Duration
}

// DefaultLimits are the engine's run bounds and a 10s pace.
func DefaultLimits() Limits {
	return Limits{MinLease: experiments.RunLease.Min, MaxLease: experiments.RunLease.Max, MaxPace: 10 * time.Second}
}

// fields says which fields each action takes besides "action".
var fields = map[Action][]string{
	Run:          {"ordering", "mode", "broken", "style", "same_identity", "lease_ms", "skew_ms", "pace_ms", "delivery"},
	Step:         nil,
	Pause:        nil,
	Play:         nil,
	Pace:         {"pace_ms"},
	Finish:       nil,
	Reset:        nil,
	PauseWorker:  {"worker"},
	ResumeWorker: {"worker"},
	KillWorker:   {"worker"},
	AddJob:       {"payload"},
	AddWorker:    {"skew_ms", "work_ms"},
	Verdict:      nil,
	Matrix:       {"lease_ms"},
	Batch:        {"name", "lease_ms"},
	Load:         {"workers", "jobs", "lease_ms", "styles"},
	Check:        {"solution", "lease_ms"},
}

// Actions lists every action, sorted.
func Actions() []string {
	out := make([]string, 0, len(fields))
	for a := range fields {
		out = append(out, string(a))
	}
	sort.Strings(out)
	return out
}

// bad is a command refused before it did anything.
func bad(format string, a ...any) error { return fault.Errorf(fault.Invalid, format, a...) }

// Parse reads one command from b and checks it against the limits.
func Parse(b []byte, lim Limits) (Command, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return Command{}, bad("a command is a JSON object like {\"action\":\"step\"}")
	}
	if dec.More() {
		return Command{}, bad("a command is one JSON object; there is more after it")
	}
	var action Action
	if err := json.Unmarshal(raw["action"], &action); err != nil || action == "" {
		return Command{}, bad("the command has no \"action\" (one of %s)", strings.Join(Actions(), ", "))
	}
	allowed, ok := fields[action]
	if !ok {
		return Command{}, bad("unknown action %q (want one of %s)", action, strings.Join(Actions(), ", "))
	}
	for k := range raw {
		if k == "action" {
			continue
		}
		if !contains(allowed, k) {
			if len(allowed) == 0 {
				return Command{}, bad("%s takes no fields, but got %q", action, k)
			}
			return Command{}, bad("%s does not take %q (it takes %s)", action, k, strings.Join(allowed, ", "))
		}
	}
	for _, k := range msFields {
		if v, ok := raw[k]; ok {
			if err := lim.validateMS(action, k, v); err != nil {
				return Command{}, err
			}
		}
	}
	if v, ok := raw["solution"]; ok {
		// A lone surrogate decodes to U+FFFD without a word: refused here,
		// as it was sent.
		if err := wire.ValidateText("solution", v); err != nil {
			var parts map[string]json.RawMessage
			if json.Unmarshal(v, &parts) == nil {
				for _, k := range sandbox.Kinds() {
					if p, ok := parts[k.String()]; ok && wire.ValidateText("solution."+k.String(), p) != nil {
						return Command{}, &sandbox.Error{Code: sandbox.CodeBadText, Kind: k, Message: wire.ValidateText("the "+k.String(), p).Error()}
					}
				}
			}
			return Command{}, err
		}
	}
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	var c Command
	if err := strict.Decode(&c); err != nil {
		return Command{}, bad("the command's fields have the wrong types: %s", jsonError(err))
	}
	return c, c.validate(lim)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// msFields are the fields in milliseconds, in the order they are checked.
var msFields = []string{"lease_ms", "pace_ms", "skew_ms", "work_ms"}

// maxWork is the longest a free-play worker may take over a job.
const maxWork = time.Minute

// msRange returns the least and the most a millisecond field may be in a
// command of the action.
func (lim Limits) msRange(a Action, field string) (least, most int64) {
	switch field {
	case "pace_ms":
		return 0, lim.MaxPace.Milliseconds()
	case "lease_ms":
		return lim.MinLease.Milliseconds(), lim.MaxLease.Milliseconds()
	case "skew_ms":
		if a == AddWorker { // a worker's clock may run behind as well as ahead
			return -experiments.MaxSkew.Milliseconds(), experiments.MaxSkew.Milliseconds()
		}
		return 0, experiments.MaxSkew.Milliseconds()
	case "work_ms":
		return 0, maxWork.Milliseconds()
	}
	return 0, 0
}

// validateMS checks a millisecond field as it was sent, before it is decoded:
// a whole number within the field's range. It is read as text and
// compared as milliseconds, so a number too big for an int64, or one that
// would overflow a time.Duration once multiplied, is refused for what it
// is and never wraps around into a small or negative duration. A lease of
// 0 means the default.
func (lim Limits) validateMS(a Action, field string, raw json.RawMessage) error {
	v := strings.TrimSpace(string(raw))
	switch {
	case v == "null":
		return nil
	case v == "":
		return bad("%s has no value", field)
	case v[0] == '"':
		return bad("%s must be a whole number of milliseconds, not a string", field)
	case v == "true" || v == "false":
		return bad("%s must be a whole number of milliseconds, not a boolean", field)
	case v[0] == '{' || v[0] == '[':
		return bad("%s must be a whole number of milliseconds, not an object or a list", field)
	case strings.ContainsAny(v, ".eE"):
		return bad("%s %s is not a whole number of milliseconds", field, shorten(v))
	}
	least, most := lim.msRange(a, field)
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil && strings.HasPrefix(v, "-"), err == nil && n < least && !(field == "lease_ms" && n == 0):
		return bad("%s %s is less than the least, %d", field, shorten(v), least)
	case err != nil, n > most:
		return bad("%s %s is more than the most, %d", field, shorten(v), most)
	}
	return nil
}

// shorten keeps a number in a message readable.
func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func (c *Command) validate(lim Limits) error {
	// Every millisecond field is within its range already (validateMS).
	switch c.Action {
	case Run:
		if c.Ordering == "" {
			return bad("run needs an ordering (one of %s)", orderings())
		}
		if _, err := experiments.ParseOrdering(string(c.Ordering)); err != nil {
			return bad("unknown ordering %q (want one of %s)", c.Ordering, orderings())
		}
		switch {
		case c.Ordering == experiments.FreePlay && c.Mode != "":
			return bad("free play has no mode: its workers run on their own")
		case c.Ordering != experiments.FreePlay && c.Mode == "":
			c.Mode = protocol.ModeAuto
		case c.Ordering != experiments.FreePlay && c.Mode != protocol.ModeAuto && c.Mode != protocol.ModeStep:
			return bad("mode %q must be auto or step", c.Mode)
		}
		if _, err := c.Guards(); err != nil {
			return err
		}
		if _, err := experiments.ParseDelivery(string(c.Delivery)); err != nil {
			return bad("%v", err)
		}
		if c.Delivery != "" && c.Ordering == experiments.FreePlay {
			return bad("free play delivers directly; a delivery mode applies to a scripted run")
		}
		if c.SkewMS != 0 && c.Ordering != experiments.ClockSkew {
			return bad("skew_ms applies only to the clock-skew ordering (in free play, give it to add_worker)")
		}
	case Pace:
		if c.PaceMS == nil {
			return bad("pace needs pace_ms")
		}
	case PauseWorker, ResumeWorker, KillWorker:
		if c.Worker == "" {
			return bad("%s needs a worker label, such as \"A\"", c.Action)
		}
		if len(c.Worker) > 8 || strings.IndexFunc(c.Worker, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
			return bad("worker %q is not a worker label (one to eight capital letters, such as \"A\")", c.Worker)
		}
	case AddJob:
		if len(c.Payload) == 0 {
			c.Payload = json.RawMessage(`{"task":"a job added by hand"}`)
		}
		if err := engine.ValidatePayload("payload", c.Payload); err != nil {
			return bad("%v", err)
		}
		// Refused here, with where it is, rather than by Postgres as a
		// data exception that names no field.
		if err := wire.ValidateText("payload", c.Payload); err != nil {
			return err
		}
	case Batch:
		name, err := experiments.ParseBatch(string(c.Name))
		if err != nil {
			return bad("%v", err)
		}
		c.Name = name // an older spelling becomes today's
	case Check:
		if c.Solution == nil {
			return bad("check needs a solution: {\"claim\": …, \"complete\": …, \"fail\": …, \"receiver\": …}")
		}
		for _, k := range sandbox.Kinds() {
			if strings.TrimSpace(c.Solution.Text(k)) == "" {
				return &sandbox.Error{Code: sandbox.CodeEmpty, Kind: k, Message: fmt.Sprintf("the solution has no %s statement", k)}
			}
		}
	case Load:
		lc := c.LoadConfig()
		if err := lc.Validate(); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// LoadConfig returns the load lab a load command asks for, its defaults
// filled in.
func (c Command) LoadConfig() experiments.LoadConfig {
	lc := experiments.LoadConfig{Workers: c.Workers, Jobs: c.Jobs, LeaseMS: c.LeaseMS, Styles: c.Styles}
	lc.Fill()
	return lc
}

func orderings() string {
	var names []string
	for _, o := range append(experiments.Orderings(), experiments.FreePlay) {
		names = append(names, string(o))
	}
	return strings.Join(names, ", ")
}

// Guards returns the broken guards the command names: its style's, plus
// each one in Broken.
func (c Command) Guards() (playground.Guards, error) {
	var gs playground.Guards
	if c.Style != "" {
		st, err := experiments.StyleByName(c.Style)
		if err != nil {
			return 0, bad("%v", err)
		}
		gs = st.Broken
	}
	for _, n := range c.Broken {
		g, err := playground.ParseGuard(n)
		if err != nil {
			return 0, bad("%v", err)
		}
		gs = gs.Break(g)
	}
	return gs, nil
}

// RunConfig returns the engine's run config for a run command.
func (c Command) RunConfig() (experiments.RunConfig, error) {
	gs, err := c.Guards()
	if err != nil {
		return experiments.RunConfig{}, err
	}
	rc := experiments.RunConfig{Ordering: c.Ordering, Broken: gs, SameIdentity: c.SameIdentity, Delivery: c.Delivery,
		Lease: time.Duration(c.LeaseMS) * time.Millisecond}
	if c.Ordering == experiments.ClockSkew {
		rc.Skew = time.Duration(c.SkewMS) * time.Millisecond
	}
	if err := rc.Validate(); err != nil {
		return rc, bad("%v", err)
	}
	return rc, nil
}
