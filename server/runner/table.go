package runner

import (
	"fmt"
	"strings"

	"github.com/fencelab/fencelab/engine"
)

// Table renders an outcome as the article's table row.
func Table(o engine.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", "ordering", "zombie's receiver call", "zombie's commit", "final state")
	fmt.Fprintf(&b, "%-20s  %-26s  %-15s  %s\n", o.Ordering, o.ZombieReceiverCall.Words(), o.ZombieCommit.Words(), FinalWords(o))
	return b.String()
}

// FinalWords says the final state as the article's table does.
func FinalWords(o engine.Outcome) string {
	row, rcv := workerName(o.Final.ResultFrom), workerName(o.Receiver.PayloadFrom)
	s := fmt.Sprintf("epoch %d, ", o.Final.Epoch)
	if row == rcv {
		s += fmt.Sprintf("%s's result in the row and at the receiver", row)
	} else {
		s += fmt.Sprintf("%s's result in the row, %s's at the receiver (epoch %d)", row, rcv, o.Receiver.Epoch)
	}
	if o.Final.Status != engine.StatusDone {
		s += fmt.Sprintf("; the job is %s", o.Final.Status)
	}
	return s
}

func workerName(label string) string {
	switch label {
	case "":
		return "nobody"
	case engine.Zombie:
		return "the zombie (A)"
	case engine.NewOwner:
		return "the new owner (B)"
	}
	return "worker " + label
}
