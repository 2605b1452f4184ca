package experiments

import ()

// Call is what became of one of the zombie's calls.
type Call string

// The values of Outcome.ZombieReceiverCall and Outcome.ZombieCommit.
const (
	CallRejected               Call = "rejected"
	CallAccepted               Call = "accepted"
	CallAcceptedThenSuperseded Call = "accepted_then_superseded"
	CallNotAttempted           Call = "not_attempted"
	// CallNeverSent: the outbox delivery; the zombie's delivery waited for
	// a commit that was fenced, so it was never written, let alone sent.
	CallNeverSent Call = "never_sent"
	// CallSkipped: the keyed delivery; the zombie looked its key up, found
	// it taken, and did not call.
	CallSkipped Call = "skipped"
)

// Answer is one of the article's answers to its question: with leases
// alone, what happens to A's commit?
type Answer string

// The answers, in the article's order.
const (
	AnswerRejected Answer = "rejected" // Postgres rejects it, because the lease expired
	AnswerSucceeds Answer = "succeeds" // It succeeds, and A's result replaces B's
	AnswerBlocks   Answer = "blocks"   // It blocks until B finishes
)

// Answers lists the article's answers in its order.
func Answers() []Answer { return []Answer{AnswerRejected, AnswerSucceeds, AnswerBlocks} }

// Expected is what a correct build shows for an ordering: the article's
// table, and its row for the crash and the skewed clock. It is what each
// run's cells are marked against; the tests check that the engine meets it.
type Expected struct {
	ZombieReceiverCall Call          `json:"zombie_receiver_call"`
	ZombieCommit       Call          `json:"zombie_commit"`
	Epoch              int64         `json:"epoch"`
	ResultFrom         string        `json:"result_from"`
	ReceiverFrom       string        `json:"receiver_from"`
	Words              ExpectedWords `json:"words"`
}

// ExpectedWords is the correct build's row of the article's table, in words.
type ExpectedWords struct {
	Call   string `json:"call"`
	Commit string `json:"commit"`
	Final  string `json:"final"`
}

// ExpectedOutcome returns the correct build's outcome for an ordering;
// free play has none.
func ExpectedOutcome(o Ordering) (Expected, bool) {
	var x Expected
	switch o {
	case NewOwnerFirst:
		x = Expected{ZombieReceiverCall: CallRejected, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case ZombieFirst:
		x = Expected{ZombieReceiverCall: CallAcceptedThenSuperseded, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case OwnerDoneFirst:
		x = Expected{ZombieReceiverCall: CallRejected, ZombieCommit: CallRejected, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case CrashBeforeCommit:
		x = Expected{ZombieReceiverCall: CallAcceptedThenSuperseded, ZombieCommit: CallNotAttempted, Epoch: 2, ResultFrom: NewOwner, ReceiverFrom: NewOwner}
	case ClockSkew:
		x = Expected{ZombieReceiverCall: CallAccepted, ZombieCommit: CallAccepted, Epoch: 1, ResultFrom: Zombie, ReceiverFrom: Zombie}
	default:
		return Expected{}, false
	}
	x.Words = ExpectedWords{Call: x.ZombieReceiverCall.Words(), Commit: x.ZombieCommit.Words(),
		Final: FinalWordsIn(o, x.Epoch, x.ResultFrom, x.ReceiverFrom, "")}
	return x, true
}
