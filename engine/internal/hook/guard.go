package hook

import (
	"fmt"
	"strings"
)

// Guard names one of the protections the engine keeps. Every guard is on by
// default; a run may break any of them on purpose to show what it protects.
// Turning a guard off removes exactly one clause of SQL or one comparison,
// never a copy of the engine: the statement a Trace shows is the one that ran,
// with a comment in the broken clause's place.
type Guard uint8

// The seven guards.
const (
	// StatusCheck: complete, fail and renew only touch a job that is still running.
	StatusCheck Guard = iota
	// OwnerCheck: the compare-and-set on complete, fail and renew matches the owner.
	OwnerCheck
	// EpochCheck: the compare-and-set on complete, fail and renew matches the epoch.
	EpochCheck
	// EpochIncrement: each claim bumps the epoch, the fencing token.
	EpochIncrement
	// ReceiverCheck: the receiver refuses an epoch older than the newest it holds.
	ReceiverCheck
	// DBClock: leases are judged on the database clock, not the worker's own.
	DBClock
	// SkipLocked: the claim locks with FOR UPDATE SKIP LOCKED rather than waiting.
	SkipLocked

	numGuards
)

var guardNames = [numGuards]string{
	StatusCheck:    "status-check",
	OwnerCheck:     "owner-check",
	EpochCheck:     "epoch-check",
	EpochIncrement: "epoch-increment",
	ReceiverCheck:  "receiver-check",
	DBClock:        "db-clock",
	SkipLocked:     "skip-locked",
}

var guardHelp = [numGuards]string{
	StatusCheck:    "complete and fail only touch a job that is still running",
	OwnerCheck:     "the compare-and-set on complete and fail matches the owner",
	EpochCheck:     "the compare-and-set on complete and fail matches the epoch",
	EpochIncrement: "each claim bumps the epoch, the fencing token",
	ReceiverCheck:  "the receiver refuses an epoch older than the newest it has",
	DBClock:        "leases are judged on the database clock, not the worker's own",
	SkipLocked:     "the claim locks with FOR UPDATE SKIP LOCKED instead of waiting",
}

// AllGuards lists every guard in a stable order.
func AllGuards() []Guard {
	gs := make([]Guard, numGuards)
	for i := range gs {
		gs[i] = Guard(i)
	}
	return gs
}

// String returns the guard's switch name, such as "epoch-check".
func (g Guard) String() string {
	if g >= numGuards {
		return fmt.Sprintf("guard(%d)", uint8(g))
	}
	return guardNames[g]
}

// Help returns one line that says what the guard does.
func (g Guard) Help() string {
	if g >= numGuards {
		return ""
	}
	return guardHelp[g]
}

// MarshalText makes a Guard encode as its name.
func (g Guard) MarshalText() ([]byte, error) {
	if g >= numGuards {
		return nil, fmt.Errorf("unknown guard %d", uint8(g))
	}
	return []byte(g.String()), nil
}

// UnmarshalText parses a guard name.
func (g *Guard) UnmarshalText(b []byte) error {
	p, err := ParseGuard(string(b))
	if err != nil {
		return err
	}
	*g = p
	return nil
}

// ParseGuard parses a guard name such as "owner-check".
func ParseGuard(s string) (Guard, error) {
	for i, n := range guardNames {
		if n == s {
			return Guard(i), nil
		}
	}
	return 0, parseErrorf("unknown guard %q (want one of %s)", s, strings.Join(guardNames[:], ", "))
}

// Guards is the set of guards a run has broken. The zero value breaks none:
// every guard is on, which is the correct build.
type Guards uint16

// ParseBroken turns a list of guard names into the set with those guards off.
func ParseBroken(names []string) (Guards, error) {
	var gs Guards
	for _, n := range names {
		g, err := ParseGuard(n)
		if err != nil {
			return 0, err
		}
		gs = gs.Break(g)
	}
	return gs, nil
}

// On reports whether guard g is kept.
func (gs Guards) On(g Guard) bool { return gs&(1<<g) == 0 }

// Break returns gs with guard g turned off.
func (gs Guards) Break(g Guard) Guards { return gs | 1<<g }

// Keep returns gs with guard g turned back on.
func (gs Guards) Keep(g Guard) Guards { return gs &^ (1 << g) }

// Broken lists the guards that are off, in the order of AllGuards.
func (gs Guards) Broken() []Guard {
	var out []Guard
	for _, g := range AllGuards() {
		if !gs.On(g) {
			out = append(out, g)
		}
	}
	return out
}

// Names lists the names of the guards that are off (never nil, so JSON shows []).
func (gs Guards) Names() []string {
	out := []string{}
	for _, g := range gs.Broken() {
		out = append(out, g.String())
	}
	return out
}

// String returns "all guards on" or the broken guards, comma-separated.
func (gs Guards) String() string {
	if gs == 0 {
		return "all guards on"
	}
	return "broken: " + strings.Join(gs.Names(), ", ")
}

// Set adds the guards named in a comma-separated list to the broken set,
// so *Guards works as a repeatable command-line flag.
// A list with a name that is no guard changes nothing.
func (gs *Guards) Set(list string) error {
	set := *gs
	for _, n := range strings.Split(list, ",") {
		g, err := ParseGuard(strings.TrimSpace(n))
		if err != nil {
			return err
		}
		set = set.Break(g)
	}
	*gs = set
	return nil
}

// Valid reports whether gs names only known guards.
func (gs Guards) Valid() bool { return gs>>numGuards == 0 }

// MarshalText encodes the set as a comma-separated list of broken guard names.
func (gs Guards) MarshalText() ([]byte, error) {
	return []byte(strings.Join(gs.Names(), ",")), nil
}

// UnmarshalText decodes a comma-separated list of broken guard names.
func (gs *Guards) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		*gs = 0
		return nil
	}
	p, err := ParseBroken(strings.Split(s, ","))
	if err != nil {
		return err
	}
	*gs = p
	return nil
}
