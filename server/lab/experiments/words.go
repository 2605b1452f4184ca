package experiments

import (
	"fmt"

	"github.com/fencelab/fencelab/engine"
)

// This file is where codes become words, once. Event narration
// (narrate.go) and verdicts (verdict.go) build their sentences from these;
// the page gets the same table with its first state (Words) and renders the
// words it is given: it never composes an outcome or a verdict of its own.

// OrderingText is how people name a scenario.
type OrderingText struct {
	Title string `json:"title"` // in a sentence: "the zombie reaches the receiver first"
	Menu  string `json:"menu"`  // as a choice: "Zombie reaches the receiver first"
	Short string `json:"short"` // in a narrow column: "zombie 1st"
}

// OrderingWords returns the words for a scenario.
func OrderingWords(o Ordering) OrderingText {
	switch o {
	case NewOwnerFirst:
		return OrderingText{"the new owner reaches the receiver first", "New owner reaches the receiver first", "owner 1st"}
	case ZombieFirst:
		return OrderingText{"the zombie reaches the receiver first", "Zombie reaches the receiver first", "zombie 1st"}
	case OwnerDoneFirst:
		return OrderingText{"the new owner finishes before the zombie wakes", "New owner finishes before the zombie wakes", "owner done"}
	case CrashBeforeCommit:
		return OrderingText{"a worker dies between its receiver call and its commit", "A worker dies before its commit", "crash"}
	case ClockSkew:
		return OrderingText{"a worker's own clock runs ahead", "A worker's clock runs ahead", "skew"}
	case FreePlay:
		return OrderingText{"free play: add jobs and workers, pause, resume and kill them", "Free play", "free"}
	}
	return OrderingText{string(o), string(o), string(o)}
}

// Words returns the words for a call's fate, as the article's table says them.
func (c Call) Words() string {
	switch c {
	case CallAcceptedThenSuperseded:
		return "accepted, then superseded"
	case CallNotAttempted:
		return "not attempted"
	case CallNeverSent:
		return "never sent (the outbox)"
	case CallSkipped:
		return "not made (the key was taken)"
	}
	return string(c)
}

// whose names a worker's result in the article's words.
func whose(label string) string {
	switch label {
	case "":
		return "nobody's"
	case Zombie:
		return "the zombie's"
	case NewOwner:
		return "the new owner's"
	}
	return "worker " + label + "'s"
}

// FinalWords says a final state as the article's table does:
// "epoch 2, the new owner's result in the row and at the receiver"; a
// status other than "" and "done" is said after it.
func FinalWords(epoch int64, rowFrom, receiverFrom, status string) string {
	return FinalWordsIn("", epoch, rowFrom, receiverFrom, status)
}

// FinalWordsIn is FinalWords for a scenario: in clock-skew nobody froze,
// so A is no zombie and the workers go by their names.
func FinalWordsIn(o Ordering, epoch int64, rowFrom, receiverFrom, status string) string {
	name := whose
	if o == ClockSkew {
		name = func(l string) string {
			if l == "" {
				return "nobody's"
			}
			return "worker " + l + "'s"
		}
	}
	s := fmt.Sprintf("epoch %d, ", epoch)
	if rowFrom == receiverFrom {
		s += name(rowFrom) + " result in the row and at the receiver"
	} else {
		s += name(rowFrom) + " result in the row, " + name(receiverFrom) + " at the receiver"
	}
	if status != "" && status != string(engine.StatusDone) {
		s += fmt.Sprintf("; the job is %s", status)
	}
	return s
}
