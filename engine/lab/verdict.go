package lab

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
)

// verdict says a scripted run's outcome in words: safe, with what the row
// and the receiver ended with; or unsafe, with the plainest violation, the
// guards whose absence let it happen, and how many more there were.
func verdict(o Outcome) string {
	if o.Safe {
		s := fmt.Sprintf("Safe: the job ended done at epoch %d with %s's result in the row and at the receiver", o.Final.Epoch, who(o.Final.ResultFrom))
		if o.ZombieCommit == CallRejected {
			s += "; the zombie's late commit was fenced"
		}
		return s + "."
	}
	first := o.Violations[0]
	s := "Unsafe: " + lowerFirst(strings.TrimSuffix(first.Text, "."))
	if len(o.Because) > 0 {
		s += ", because " + guardList(o.Because)
		if len(o.Because) > 1 {
			s += " were off"
		} else {
			s += " was off"
		}
		broken, _ := engine.ParseBroken(o.Broken)
		if first.Invariant == InvStaleWrite && o.SameIdentity && !broken.On(engine.EpochCheck) {
			s += " and both workers had the same name, so the owner check could not tell them apart"
		}
	}
	if n := len(o.Violations) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s + "."
}

// reportVerdict says a free-play run's report in words.
func reportVerdict(rep Report) string {
	switch {
	case len(rep.Jobs) == 0:
		return "No jobs yet: add one, and some workers."
	case rep.Safe:
		return fmt.Sprintf("Safe so far: %d of %d jobs done, no write from a lost lease landed, and the receiver never went backwards.", rep.Done, len(rep.Jobs))
	}
	s := "Unsafe: " + lowerFirst(strings.TrimSuffix(rep.Violations[0].Text, "."))
	if n := len(rep.Violations) - 1; n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s + "."
}

func guardList(names []string) string {
	switch len(names) {
	case 1:
		return "the " + names[0] + " guard"
	case 2:
		return "the " + names[0] + " and " + names[1] + " guards"
	}
	return "the " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1] + " guards"
}

// lowerFirst lowers the first letter of a sentence so it can follow a
// colon: "The row" and "Worker A" become "the row" and "worker A"; a word
// in capitals ("SIGKILL") stays as it is.
func lowerFirst(s string) string {
	if len(s) > 1 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'a' && s[1] <= 'z' {
		return strings.ToLower(s[:1]) + s[1:]
	}
	return s
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
