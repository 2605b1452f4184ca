package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"

	"github.com/fencelab/fencelab/server/sandbox"
)

// A prestarted worker: `fencelab worker --prestarted` is a worker process
// started before anyone needs it, so that a burst of runs does not wait
// for two hundred processes to be spawned one after another on cores that
// are busy with the runs. It waits, doing nothing, for its one
// Assignment, the first line on its stdin: the flags and environment a
// worker started then would have had. From then on it is that worker, and
// its stdin carries commands as any worker's does. Its stdin ending before
// the assignment (its supervisor gone) ends it.
//
// The assignment carries the secrets a cold start would put in the
// environment (the connection string, the receiver's credential, a
// reader's role), over a pipe only its supervisor holds: never on a
// command line.

// FlagPrestarted is the one flag of a prestarted worker.
const FlagPrestarted = "--prestarted"

// Assignment is what a prestarted worker is told to be.
type Assignment struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

// MaxAssignmentBytes bounds an assignment's line: a reader's statements
// ride in its environment.
const MaxAssignmentBytes = 1 << 20

// AssignmentEnv are the environment entries an assignment may carry: what
// a supervisor gives one worker and not the others. Any other is refused.
var AssignmentEnv = []string{
	"DATABASE_URL", EnvReceiverURL, EnvReceiverCredential,
	sandbox.EnvStatements, sandbox.EnvRole, sandbox.EnvPassword,
}

// ParseAssignment reads an assignment's line; it refuses unknown fields
// and environment entries that AssignmentEnv does not name.
func ParseAssignment(line []byte) (Assignment, error) {
	var a Assignment
	if len(line) > MaxAssignmentBytes {
		return a, usagef("the assignment is over %d bytes", MaxAssignmentBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return Assignment{}, usagef("the assignment is not JSON of args and env: %v", err)
	}
	if dec.More() {
		return Assignment{}, usagef("the assignment has more after its object")
	}
	for k := range a.Env {
		if !slices.Contains(AssignmentEnv, k) {
			return Assignment{}, usagef("the assignment's environment may not set %q", k)
		}
	}
	return a, nil
}

// mainPrestarted is Main for a prestarted worker: it waits for its
// assignment, then runs as the worker it names.
func mainPrestarted(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usagef("%s takes no other flag: the assignment carries them", FlagPrestarted)
	}
	if stdin == nil {
		return usagef("%s needs its assignment on stdin", FlagPrestarted)
	}
	br := bufio.NewReaderSize(stdin, 64<<10)
	line, err := readAssignment(ctx, br)
	if err != nil || line == nil {
		return err // nil: let go unused
	}
	a, err := ParseAssignment(line)
	if err != nil {
		return err
	}
	env := func(k string) string {
		if v, ok := a.Env[k]; ok {
			return v
		}
		return getenv(k)
	}
	cfg, err := ParseFlags(a.Args, env, stderr)
	if err != nil {
		return err
	}
	// The commands that follow the assignment may be in br's buffer.
	return Run(ctx, cfg, br, stdout)
}

// errNoAssignment is a prestarted worker's stdin ending before its
// assignment came: its supervisor is gone, or let it go unused.
var errNoAssignment = errors.New("no assignment")

// readAssignment reads the first line of br, up to MaxAssignmentBytes.
func readAssignment(ctx context.Context, br *bufio.Reader) ([]byte, error) {
	type read struct {
		line []byte
		err  error
	}
	got := make(chan read, 1)
	go func() {
		var line []byte
		for {
			b, err := br.ReadSlice('\n')
			line = append(line, b...)
			if len(line) > MaxAssignmentBytes {
				got <- read{err: usagef("the assignment is over %d bytes", MaxAssignmentBytes)}
				return
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil && len(bytes.TrimSpace(line)) == 0 {
				got <- read{err: errNoAssignment}
				return
			}
			got <- read{line: bytes.TrimSpace(line)}
			return
		}
	}()
	select {
	case r := <-got:
		if errors.Is(r.err, errNoAssignment) {
			return nil, nil
		}
		return r.line, r.err
	case <-ctx.Done():
		return nil, nil // stopped before it was needed: nothing to say
	}
}
