package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outbox is the fix for an external effect a zombie must never cause
// (an email sent, money moved): the delivery is written by the same
// statement as the compare-and-set commit that earns it, and a relay sends
// it to the receiver only after that commit. A fenced commit writes
// nothing, so the zombie's delivery never exists, let alone goes out.

// OutboxMessage is one delivery waiting in the outbox.
type OutboxMessage struct {
	ID        int64     `json:"id"`
	Delivery  Delivery  `json:"delivery"`
	CreatedAt time.Time `json:"created_at"`
}

// CompleteOutbox is Complete that also writes d to the outbox, in the same
// statement: d exists if and only if the commit landed. d must be about
// the claim's job and epoch.
func (q *Queue) CompleteOutbox(ctx context.Context, c Claim, result []byte, d Delivery) (time.Time, error) {
	if err := q.validateHeld("complete", c); err != nil {
		return time.Time{}, err
	}
	if err := ValidatePayload("result", result); err != nil {
		return time.Time{}, fmt.Errorf("complete job %d: %w", c.JobID, err)
	}
	if err := d.Validate(); err != nil {
		return time.Time{}, fmt.Errorf("complete job %d: outbox: %w", c.JobID, err)
	}
	if d.JobID != c.JobID || d.Epoch != c.Epoch {
		return time.Time{}, fmt.Errorf("complete job %d: %w", c.JobID, invalidf("the outbox delivery is for job %d at epoch %d, not the claim's", d.JobID, d.Epoch))
	}
	var epoch *int64
	return q.cas(ctx, "complete", c, jobCompleteOutbox(q.cfg.Schema, q.hooks().Broken, c.JobID, c.Owner, c.Epoch, result, d), &epoch)
}

// OutboxPending reads up to limit deliveries not sent yet, oldest first.
// A relay sends each, then marks it with OutboxSent: a delivery is sent at
// least once, and a receiver that accepts the same epoch again makes a
// second send harmless.
func (q *Queue) OutboxPending(ctx context.Context, limit int) ([]OutboxMessage, error) {
	if limit <= 0 || limit > 10000 {
		return nil, fmt.Errorf("outbox: %w", invalidf("limit %d must be between 1 and 10000", limit))
	}
	st := outboxPending(q.cfg.Schema, limit)
	rows, err := q.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, translate("outbox", err)
	}
	defer rows.Close()
	var out []OutboxMessage
	for rows.Next() {
		var m OutboxMessage
		var payload []byte
		if err := rows.Scan(&m.ID, &m.Delivery.JobID, &m.Delivery.Epoch, &m.Delivery.Owner, &payload, &m.CreatedAt); err != nil {
			return nil, translate("outbox", err)
		}
		m.Delivery.Payload = payload
		out = append(out, m)
	}
	return out, translate("outbox", rows.Err())
}

// OutboxSent marks a delivery of the outbox sent.
func (q *Queue) OutboxSent(ctx context.Context, id int64) error {
	st := outboxSent(q.cfg.Schema, id)
	start := time.Now()
	tag, err := q.db.Exec(ctx, st.SQL, st.Args...)
	q.trace(st, tag.RowsAffected(), time.Time{}, err, start)
	return translate(fmt.Sprintf("outbox: mark %d sent", id), err)
}

// Outbox returns a TxFunc that writes d to the outbox, for a TxHandler to
// return (alone, or called from its own TxFunc with the tx it is given):
// the pool runs it in the transaction that records the job's completion,
// so the delivery exists if and only if the completion landed, as with
// CompleteOutbox on the one-job path. d should be about the claim's job
// and epoch.
func (q *Queue) Outbox(d Delivery) TxFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		st := outboxInsert(q.cfg.Schema, d)
		start := time.Now()
		tag, err := tx.Exec(ctx, st.SQL, st.Args...)
		q.trace(st, tag.RowsAffected(), time.Time{}, err, start)
		return translate(fmt.Sprintf("outbox: job %d at epoch %d", d.JobID, d.Epoch), err)
	}
}
