package protocol

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine/playground"
	"github.com/fencelab/fencelab/server/lab/experiments"
)

// verdict says a scripted run's outcome in words: its headline, then
// every further violation, each in its own sentence.
func OutcomeVerdict(o Outcome) string {
	if o.Safe {
		return Headline(o)
	}
	return Headline(o) + also(o.Violations[1:])
}

// headline says a scripted run's outcome in one sentence: safe, with what
// the row and the receiver ended with; or unsafe, with the plainest
// violation and the guards whose absence let it happen.
func Headline(o Outcome) string {
	if o.Safe {
		s := fmt.Sprintf("Safe: the job ended done at epoch %d with %s's result in the row and at the receiver", o.Final.Epoch, Who(o.Final.ResultFrom))
		if o.ZombieCommit == experiments.CallRejected {
			s += "; the zombie's late commit was fenced"
		}
		return s + "."
	}
	first := o.Violations[0]
	s := "Unsafe: " + LowerFirst(strings.TrimSuffix(first.Text, "."))
	if len(o.Because) > 0 && leasesAlone(o.Broken) {
		s += ", because nothing but the lease guarded the job (leases alone): " + guardList(o.Because) + " were off"
	} else if len(o.Because) > 0 {
		s += ", because " + guardList(o.Because)
		if len(o.Because) > 1 {
			s += " were off"
		} else {
			s += " was off"
		}
		broken, _ := playground.ParseBroken(o.Broken)
		if first.Invariant == InvStaleWrite && o.SameIdentity && !broken.On(playground.EpochCheck) {
			s += " and both workers had the same name, so the owner check could not tell them apart"
		}
	} else if o.Delivery == experiments.DeliverKeyed && first.Invariant == InvReceiverLastOwner {
		s += ", because the receiver is a third party that knows no epochs: it kept the first delivery of the key, which was the zombie's"
	}
	return s + "."
}

// leasesAlone reports whether broken turns off every check that the
// leases-alone style turns off: nothing checks the token anywhere.
func leasesAlone(broken []string) bool {
	gs, err := playground.ParseBroken(broken)
	if err != nil {
		return false
	}
	alone, _ := experiments.StyleByName("leases-alone")
	for _, g := range playground.AllGuards() {
		if !alone.Broken.On(g) && gs.On(g) {
			return false
		}
	}
	return true
}

// also says every further violation, each in its own sentence.
func also(vs []Violation) string {
	if len(vs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" Also:")
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.Text] {
			continue
		}
		seen[v.Text] = true
		b.WriteString(" " + v.Text)
	}
	return b.String()
}

// ReportVerdict says a free-play run's report in words: its headline and
// every further violation.
func ReportVerdict(rep Report) string {
	if rep.Safe || len(rep.Violations) == 0 {
		return ReportHeadline(rep)
	}
	return ReportHeadline(rep) + also(rep.Violations[1:])
}

// ReportHeadline says a free-play run's report in one sentence.
func ReportHeadline(rep Report) string {
	switch {
	case len(rep.Jobs) == 0:
		return "No jobs yet: add one, and some workers."
	case rep.Safe:
		return fmt.Sprintf("Safe so far: %d of %d jobs done, no write from a lost lease landed, and the receiver never went backwards.", rep.Done, len(rep.Jobs))
	}
	return "Unsafe: " + LowerFirst(rep.Violations[0].Text)
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
func LowerFirst(s string) string {
	if len(s) > 1 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'a' && s[1] <= 'z' {
		return strings.ToLower(s[:1]) + s[1:]
	}
	return s
}

func UpperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
