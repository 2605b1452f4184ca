package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fencelab/fencelab/engine/internal/hook"
	"github.com/jackc/pgx/v5"
)

// Validate checks a delivery before it reaches the database.
func (d Delivery) Validate() error {
	if err := validateJobID(d.JobID); err != nil {
		return err
	}
	if d.Epoch < 0 {
		return invalidf("epoch %d is negative", d.Epoch)
	}
	if err := ValidateOwner(d.Owner); err != nil {
		return err
	}
	return ValidatePayload("payload", d.Payload)
}

// Receipt is the receiver's answer.
type Receipt struct {
	Decision Decision `json:"decision"`
	JobID    int64    `json:"job_id"`
	Epoch    int64    `json:"epoch"`
	// HeldEpoch is the newest epoch the receiver holds after this delivery.
	HeldEpoch int64 `json:"held_epoch"`
	// Superseded is the epoch this delivery replaced, if it replaced one.
	Superseded      *int64    `json:"superseded,omitempty"`
	SupersededOwner string    `json:"superseded_owner,omitempty"`
	Accepted        int       `json:"accepted"` // how many deliveries the held row has taken
	DBTime          time.Time `json:"db_time"`
	DecisionSeq     int64     `json:"decision_seq"`
}

// Held is what the receiver keeps for a job.
type Held struct {
	JobID     int64           `json:"job_id"`
	Epoch     int64           `json:"epoch"`
	Owner     string          `json:"owner"`
	Payload   json.RawMessage `json:"payload"`
	Accepted  int             `json:"accepted"`
	UpdatedAt time.Time       `json:"updated_at"`
	DBTime    time.Time       `json:"db_time"`
}

// DecisionRecord is one line of the receiver's decision log.
type DecisionRecord struct {
	Seq       int64           `json:"seq"`
	JobID     int64           `json:"job_id"`
	Epoch     int64           `json:"epoch"`
	Owner     string          `json:"owner"`
	Payload   json.RawMessage `json:"payload"`
	Decision  Decision        `json:"decision"`
	HeldEpoch *int64          `json:"held_epoch"`
	PrevEpoch *int64          `json:"prev_epoch"`
	At        time.Time       `json:"at"`
}

// Receiver keeps the rules of the external system that workers call before
// they commit (rule 4): newest epoch per job wins, older epochs are refused,
// the same epoch is accepted again. Safe for concurrent use when its DB is.
type Receiver struct {
	db     TxDB
	schema string
	receiverSlot
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	Schema string // the receiver's own schema
}

// NewReceiver validates cfg and returns a Receiver over db.
func NewReceiver(db TxDB, cfg ReceiverConfig) (*Receiver, error) {
	if err := ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	return &Receiver{db: db, schema: cfg.Schema}, nil
}

func (r *Receiver) trace(st hook.Statement, rows int64, at time.Time, err error, start time.Time) {
	if r.hooks().Trace != nil {
		r.hooks().Trace(hook.Trace{Statement: st, Rows: rows, DBTime: at, Err: err, Elapsed: time.Since(start)})
	}
}

// Deliver applies the receiver's rule to d in one atomic conditional upsert
// and logs the decision in the same transaction. A refusal returns the
// receipt and a *StaleError; concurrent deliveries for one job serialize on
// its row, so the held epoch never goes backwards while the guard is on.
func (r *Receiver) Deliver(ctx context.Context, d Delivery) (Receipt, error) {
	if err := d.Validate(); err != nil {
		return Receipt{}, fmt.Errorf("deliver: %w", err)
	}
	if r.hooks().Rule != nil {
		return r.deliverByRule(ctx, d)
	}
	decide := r.decideEpoch
	if r.hooks().Keyed {
		decide = r.decideKeyed
	}
	var rc Receipt
	err := inTx(ctx, r.db, func(tx pgx.Tx) error {
		rc = Receipt{JobID: d.JobID, Epoch: d.Epoch}
		refused, err := decide(ctx, tx, d, &rc)
		switch {
		case err != nil:
			return err
		case refused:
			held, err := r.get(ctx, tx, d.JobID)
			if err != nil {
				return err
			}
			rc.HeldEpoch, rc.Accepted, rc.DBTime = held.Epoch, held.Accepted, held.DBTime
		}
		held := rc.HeldEpoch
		lst := receiverDecisionInsert(r.schema, d, rc.Decision, &held, rc.Superseded)
		start := time.Now()
		var at time.Time
		err = tx.QueryRow(ctx, lst.SQL, lst.Args...).Scan(&rc.DecisionSeq, &at)
		r.trace(lst, rowsOf(err), at, err, start)
		return err
	})
	if err != nil {
		return Receipt{}, translate(fmt.Sprintf("deliver job %d", d.JobID), err)
	}
	if rc.Decision == RefusedStale {
		return rc, &StaleError{JobID: d.JobID, Epoch: d.Epoch, HeldEpoch: rc.HeldEpoch}
	}
	return rc, nil
}

// decideEpoch is the fencing receiver's rule: keep the newest epoch, refuse
// an older one, take the same one again. It fills rc's decision and reports
// whether the delivery changed nothing (the caller then reads what is held).
func (r *Receiver) decideEpoch(ctx context.Context, tx pgx.Tx, d Delivery, rc *Receipt) (refused bool, err error) {
	st := receiverDeliver(r.schema, r.hooks().Broken, d)
	start := time.Now()
	var prevOwner *string
	err = tx.QueryRow(ctx, st.SQL, st.Args...).Scan(&rc.HeldEpoch, &rc.Superseded, &prevOwner, &rc.Accepted, &rc.DBTime)
	r.trace(st, rowsOf(err), rc.DBTime, noRowsOK(err), start)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rc.Decision, rc.Superseded = RefusedStale, nil
		return true, nil
	case err != nil:
		return false, err
	case rc.Superseded == nil:
		rc.Decision = AcceptedFirst
	case *rc.Superseded < d.Epoch:
		rc.Decision = AcceptedNewer
	case *rc.Superseded == d.Epoch:
		rc.Decision = AcceptedSame
	default:
		rc.Decision = AcceptedOlder
	}
	if prevOwner != nil && rc.Decision != AcceptedFirst {
		rc.SupersededOwner = *prevOwner
	}
	if rc.Decision == AcceptedFirst {
		rc.Superseded = nil
	}
	return false, nil
}

// decideKeyed is a keyed receiver's rule: the first delivery for a job is
// applied, a later one is a Duplicate that changes nothing.
func (r *Receiver) decideKeyed(ctx context.Context, tx pgx.Tx, d Delivery, rc *Receipt) (refused bool, err error) {
	st := receiverDeliverKeyed(r.schema, d)
	start := time.Now()
	err = tx.QueryRow(ctx, st.SQL, st.Args...).Scan(&rc.HeldEpoch, &rc.DBTime)
	r.trace(st, rowsOf(err), rc.DBTime, noRowsOK(err), start)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rc.Decision = Duplicate
		return true, nil
	case err != nil:
		return false, err
	}
	rc.Decision, rc.Accepted = AcceptedFirst, 1
	return false, nil
}

// Get reads what the receiver holds for a job; ErrJobNotFound if nothing.
func (r *Receiver) Get(ctx context.Context, jobID int64) (Held, error) {
	if err := validateJobID(jobID); err != nil {
		return Held{}, fmt.Errorf("receiver get: %w", err)
	}
	return r.get(ctx, r.db, jobID)
}

func (r *Receiver) get(ctx context.Context, db DB, jobID int64) (Held, error) {
	st := receiverGet(r.schema, jobID)
	start := time.Now()
	var h Held
	var payload []byte
	err := db.QueryRow(ctx, st.SQL, st.Args...).Scan(&h.JobID, &h.Epoch, &h.Owner, &payload, &h.Accepted, &h.UpdatedAt, &h.DBTime)
	r.trace(st, rowsOf(err), h.DBTime, noRowsOK(err), start)
	if errors.Is(err, pgx.ErrNoRows) {
		return Held{}, fmt.Errorf("receiver holds nothing for job %d: %w", jobID, ErrJobNotFound)
	}
	if err != nil {
		return Held{}, translate(fmt.Sprintf("receiver get job %d", jobID), err)
	}
	h.Payload = payload
	return h, nil
}

// Decisions reads the receiver's decision log for a job, oldest first.
func (r *Receiver) Decisions(ctx context.Context, jobID int64) ([]DecisionRecord, error) {
	if err := validateJobID(jobID); err != nil {
		return nil, fmt.Errorf("receiver decisions: %w", err)
	}
	st := receiverDecisionList(r.schema, jobID)
	op := fmt.Sprintf("receiver decisions for job %d", jobID)
	rows, err := r.db.Query(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, translate(op, err)
	}
	defer rows.Close()
	var out []DecisionRecord
	for rows.Next() {
		var d DecisionRecord
		var payload []byte
		if err := rows.Scan(&d.Seq, &d.JobID, &d.Epoch, &d.Owner, &payload, &d.Decision, &d.HeldEpoch, &d.PrevEpoch, &d.At); err != nil {
			return nil, translate(op, err)
		}
		d.Payload = payload
		out = append(out, d)
	}
	return out, translate(op, rows.Err())
}

// deliverByRule applies a delivery with the caller's Rule: what is held
// before, the rule, what is held after, and the decision logged from the
// two.
func (r *Receiver) deliverByRule(ctx context.Context, d Delivery) (Receipt, error) {
	before, err := r.heldOrNil(ctx, d.JobID)
	if err != nil {
		return Receipt{}, translate(fmt.Sprintf("deliver job %d", d.JobID), err)
	}
	start := time.Now()
	taken, st, err := r.hooks().Rule(ctx, d)
	if st.SQL != "" {
		r.trace(st, boolRows(taken), time.Time{}, err, start)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("deliver job %d: %w", d.JobID, err)
	}
	after, err := r.heldOrNil(ctx, d.JobID)
	if err != nil {
		return Receipt{}, translate(fmt.Sprintf("deliver job %d", d.JobID), err)
	}
	rc := Receipt{JobID: d.JobID, Epoch: d.Epoch, Decision: RefusedStale}
	if after != nil {
		rc.HeldEpoch, rc.Accepted, rc.DBTime = after.Epoch, after.Accepted, after.DBTime
	}
	if taken {
		switch {
		case before == nil:
			rc.Decision = AcceptedFirst
		case before.Epoch < d.Epoch:
			rc.Decision = AcceptedNewer
		case before.Epoch == d.Epoch:
			rc.Decision = AcceptedSame
		default:
			rc.Decision = AcceptedOlder
		}
		if before != nil {
			prev := before.Epoch
			rc.Superseded, rc.SupersededOwner = &prev, before.Owner
		}
	}
	held := rc.HeldEpoch
	lst := receiverDecisionInsert(r.schema, d, rc.Decision, &held, rc.Superseded)
	start = time.Now()
	var at time.Time
	err = r.db.QueryRow(ctx, lst.SQL, lst.Args...).Scan(&rc.DecisionSeq, &at)
	r.trace(lst, rowsOf(err), at, err, start)
	if err != nil {
		return Receipt{}, translate(fmt.Sprintf("deliver job %d", d.JobID), err)
	}
	if rc.DBTime.IsZero() {
		rc.DBTime = at
	}
	if rc.Decision == RefusedStale {
		return rc, &StaleError{JobID: d.JobID, Epoch: d.Epoch, HeldEpoch: rc.HeldEpoch}
	}
	return rc, nil
}

func (r *Receiver) heldOrNil(ctx context.Context, jobID int64) (*Held, error) {
	h, err := r.get(ctx, r.db, jobID)
	if errors.Is(err, ErrJobNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &h, nil
}

func boolRows(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
