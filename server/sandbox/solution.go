package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fencelab/fencelab/server/lab/judge"
)

// Solution is a reader's answer to the article's Step 2: the four
// statements, as they wrote them, with named parameters (SpecOf).
type Solution struct {
	Claim    string `json:"claim"`
	Complete string `json:"complete"`
	Fail     string `json:"fail"`
	Receiver string `json:"receiver"`
}

// field returns the place of the statement of kind k, nil for no kind.
func (s *Solution) field(k Kind) *string {
	return kindField(k, &s.Claim, &s.Complete, &s.Fail, &s.Receiver)
}

// kindField returns the one of four places, in the kinds' order, that
// holds kind k's; nil for no kind.
func kindField[T any](k Kind, claim, complete, fail, receiver *T) *T {
	switch k {
	case Claim:
		return claim
	case Complete:
		return complete
	case Fail:
		return fail
	case Receiver:
		return receiver
	}
	return nil
}

// Text returns the statement of one kind.
func (s Solution) Text(k Kind) string {
	if f := s.field(k); f != nil {
		return *f
	}
	return ""
}

// With returns s with the statement of kind k replaced.
func (s Solution) With(k Kind, text string) Solution {
	if f := s.field(k); f != nil {
		*f = text
	}
	return s
}

// startClaimSQL is the article's "leases alone": one statement that takes
// a pending job, or a running one whose lease ran out on the database
// clock, with FOR UPDATE SKIP LOCKED (requirement 1), and no epoch: it
// returns the column the workers read, but nothing raises it. The
// increment (requirement 2) and everything that reads the epoch back
// (3 and 4) are the reader's to add.
const startClaimSQL = `UPDATE jobs
   SET status = 'running',
       owner = :owner,
       attempts = attempts + 1,
       lease_until = now() + :lease,
       updated_at = now()
 WHERE id = (
       SELECT id FROM jobs
        WHERE status = 'pending'
           OR (status = 'running' AND lease_until < now())
        ORDER BY id
        LIMIT 1
          FOR UPDATE SKIP LOCKED)
RETURNING id, owner, epoch, lease_until`

// Start is the solution the page starts from: the article's leases-alone
// build (a claim with a lease and no epoch, a plain UPDATE … SET status =
// 'done', a receiver that takes every delivery), which the zombie beats.
func Start() Solution {
	return Solution{
		Claim: startClaimSQL,
		Complete: `UPDATE jobs
   SET status = 'done',
       result = :result,
       lease_until = NULL,
       updated_at = now()
 WHERE id = :id`,
		Fail: `UPDATE jobs
   SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
       error = :error,
       lease_until = NULL,
       updated_at = now()
 WHERE id = :id`,
		Receiver: `INSERT INTO deliveries AS held (job_id, epoch, owner, payload)
VALUES (:job_id, :epoch, :owner, :body)
ON CONFLICT (job_id) DO UPDATE
   SET epoch = EXCLUDED.epoch,
       owner = EXCLUDED.owner,
       payload = EXCLUDED.payload,
       accepted = held.accepted + 1,
       updated_at = now()`,
	}
}

// Ours is fencelab's own solution in the reader's terms: the engine's
// statements (engine/queries.go: JobClaim, JobComplete, JobFail,
// ReceiverDeliver) without what only the engine reads (the row as it was
// judged, the superseded epoch). It is Start with the article's clauses
// added, and nothing else: the claim raises the epoch, complete and fail
// compare-and-set on the status, the owner and the epoch, and the
// receiver takes no epoch older than the one it holds.
func Ours() Solution {
	start := Start()
	const fenced = `
   AND status = 'running'
   AND owner = :owner
   AND epoch = :epoch`
	return Solution{
		Claim:    strings.Replace(start.Claim, "       attempts = attempts + 1,", "       epoch = epoch + 1,\n       attempts = attempts + 1,", 1),
		Complete: start.Complete + fenced,
		Fail:     start.Fail + fenced,
		Receiver: start.Receiver + `
 WHERE held.epoch <= EXCLUDED.epoch`,
	}
}

// Statements are a solution's four statements, each checked.
type Statements struct {
	Claim, Complete, Fail, Receiver *Vetted
}

// field returns the place of the checked statement of kind k, nil for
// no kind.
func (s *Statements) field(k Kind) **Vetted {
	return kindField(k, &s.Claim, &s.Complete, &s.Fail, &s.Receiver)
}

// Of returns the checked statement of one kind.
func (s *Statements) Of(k Kind) *Vetted {
	if f := s.field(k); f != nil {
		return *f
	}
	return nil
}

func (s *Statements) set(k Kind, c *Vetted) {
	if f := s.field(k); f != nil {
		*f = c
	}
}

// VetSolution vets all four statements of a solution as the role, in
// the article's order, and returns the first refusal (an *Error naming
// its kind). Nothing runs.
func (r *Role) VetSolution(ctx context.Context, sol Solution) (*Statements, error) {
	st := &Statements{}
	for _, k := range Kinds() {
		c, err := r.Vet(ctx, k, sol.Text(k))
		if err != nil {
			return nil, err
		}
		st.set(k, c)
	}
	return st, nil
}

// Load rebuilds a statement that Vet passed, in another process (a
// worker that got the reader's text in its environment), without
// Postgres: the text is rewritten and its first keyword checked again,
// and the result runs with Exec on a connection of the run's role, whose
// rights are what hold. Its Columns are unknown until it runs.
func Load(kind Kind, text string, s judge.Schemas) (_ *Vetted, err error) {
	defer func() { err = located(err, text) }()
	spec, ok := SpecOf(kind)
	if !ok {
		return nil, fmt.Errorf("load: no statement kind %d", int(kind))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	rw, err := rewrite(kind, text, spec.paramNames())
	if err != nil {
		return nil, err
	}
	if !slices.Contains(spec.Verbs, rw.first) {
		return nil, newError(CodeWrongKind, kind, firstPosition(rw), "the %s must be %s; this statement starts with %s",
			kind, verbList(spec), quoteWord(rw.first))
	}
	c := &Vetted{Kind: kind, Text: text, SQL: rw.sql, Params: rw.params, rw: rw, resetSQL: resetSQL(s), schemas: s}
	for _, p := range rw.params {
		c.oids = append(c.oids, spec.param(p).oid)
	}
	return c, nil
}

// The environment a worker that runs a reader's statements gets from its
// supervisor: never its command line, where every local user can read it.
const (
	// EnvStatements holds the solution's worker statements (claim,
	// complete, fail) as JSON.
	EnvStatements = "FENCELAB_SQL_STATEMENTS"
	// EnvRole and EnvPassword are the run's role and its password: the
	// worker connects as the role, never as the server.
	EnvRole     = "FENCELAB_SQL_ROLE"
	EnvPassword = "FENCELAB_SQL_PASSWORD"
)

// workerEnv is what EnvStatements holds.
type workerEnv struct {
	Claim    string        `json:"claim"`
	Complete string        `json:"complete"`
	Fail     string        `json:"fail"`
	Schemas  judge.Schemas `json:"schemas"`
}

// WorkerEnv returns the environment entries that let a worker run the
// solution's claim, complete and fail as the role.
func (r *Role) WorkerEnv(sol Solution) ([]string, error) {
	b, err := json.Marshal(workerEnv{Claim: sol.Claim, Complete: sol.Complete, Fail: sol.Fail, Schemas: r.schemas})
	if err != nil {
		return nil, err
	}
	return []string{EnvStatements + "=" + string(b), EnvRole + "=" + r.name, EnvPassword + "=" + r.password}, nil
}

// ErrNoStatements says a worker's environment has no reader's statements.
var ErrNoStatements = errors.New("no reader's statements in the environment")

// WorkerSQL is what a worker reads from its environment: the reader's
// three worker statements, loaded, and the role to run them as.
type WorkerSQL struct {
	Claim, Complete, Fail *Vetted
	Schemas               judge.Schemas
	Role, Password        string
}

// FromEnv reads what WorkerEnv wrote and loads the statements (Load).
// ErrNoStatements when there are none.
func FromEnv(getenv func(string) string) (*WorkerSQL, error) {
	raw := getenv(EnvStatements)
	if raw == "" {
		return nil, ErrNoStatements
	}
	var we workerEnv
	if err := json.Unmarshal([]byte(raw), &we); err != nil {
		return nil, fmt.Errorf("$%s is not the statements' JSON", EnvStatements)
	}
	w := &WorkerSQL{Schemas: we.Schemas, Role: getenv(EnvRole), Password: getenv(EnvPassword)}
	if w.Role == "" || w.Password == "" {
		return nil, fmt.Errorf("$%s and $%s are required with $%s", EnvRole, EnvPassword, EnvStatements)
	}
	var err error
	if w.Claim, err = Load(Claim, we.Claim, we.Schemas); err != nil {
		return nil, err
	}
	if w.Complete, err = Load(Complete, we.Complete, we.Schemas); err != nil {
		return nil, err
	}
	if w.Fail, err = Load(Fail, we.Fail, we.Schemas); err != nil {
		return nil, err
	}
	return w, nil
}
