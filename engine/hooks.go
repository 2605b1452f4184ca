package engine

import "github.com/fencelab/fencelab/engine/internal/hook"

// The hooks' places in a Queue and a Receiver (engine/internal/hook), under
// names no other package can use: package engine/playground reaches them
// through hook.Of, and a library user never does. A queue made by NewQueue
// keeps every guard.
type (
	queueSlot    = hook.Slot[hook.Queue[Job]]
	receiverSlot = hook.Slot[hook.Receiver[Delivery]]
)

func (q *Queue) hooks() *hook.Queue[Job] { return hook.In(&q.queueSlot) }

func (r *Receiver) hooks() *hook.Receiver[Delivery] { return hook.In(&r.receiverSlot) }
