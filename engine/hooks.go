package engine

import (
	"context"

	"github.com/fencelab/fencelab/engine/internal/hook"
)

// The bridges package engine/playground reaches a Queue's and a
// Receiver's hooks through (engine/internal/hook). A library user never
// sets them: a queue made by NewQueue keeps every guard.
func init() {
	hook.QueueOf = func(q any) *hook.Queue { return &q.(*Queue).hooks }
	hook.ReceiverOf = func(r any) *hook.Receiver { return &r.(*Receiver).hooks }
	hook.Expired = func(ctx context.Context, q any) (any, error) { return q.(*Queue).expired(ctx) }
	hook.Claimable = func(ctx context.Context, q any) (int, error) { return q.(*Queue).claimable(ctx) }
	hook.SchemaLock = schemaLock
	hook.Translate = translate
	hook.DropSchemas = func(ctx context.Context, db any, schemas ...string) error {
		return dropSchemas(ctx, db.(TxDB), schemas...)
	}
}
