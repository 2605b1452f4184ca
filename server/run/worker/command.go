package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// This file is the worker's side of its protocol with the supervisor:
// commands come in on stdin as JSON lines; events go out on stdout as JSON
// lines, one protocol.Event each (see events.go).

// The commands a supervisor can send.
const (
	CmdProceed = "proceed" // go past the checkpoint the worker waits at
	CmdFail    = "fail"    // at the commit checkpoint: report a failure instead of completing
	CmdStop    = "stop"    // exit after the current step
)

// Command is one line a supervisor writes on a worker's stdin.
type Command struct {
	Cmd string `json:"cmd"`
	// Checkpoint, if set, must name the checkpoint the worker waits at; a
	// command meant for another checkpoint is refused and changes nothing.
	Checkpoint protocol.Checkpoint `json:"checkpoint,omitempty"`
}

// maxCommandBytes bounds one command line.
const maxCommandBytes = 4 << 10

// ParseCommand decodes and validates one command line.
func ParseCommand(line []byte) (Command, error) {
	if len(line) > maxCommandBytes {
		return Command{}, fmt.Errorf("command is %d bytes; the limit is %d", len(line), maxCommandBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var c Command
	if err := dec.Decode(&c); err != nil {
		return Command{}, errors.New("command is not a JSON object of {cmd, checkpoint}")
	}
	if dec.More() {
		return Command{}, errors.New("command has trailing data after the JSON object")
	}
	switch c.Cmd {
	case CmdProceed, CmdFail, CmdStop:
	default:
		return Command{}, fmt.Errorf("unknown command %q (want proceed, fail or stop)", c.Cmd)
	}
	switch c.Checkpoint {
	case "", protocol.CheckpointClaim, protocol.CheckpointDeliver, protocol.CheckpointCommit:
	default:
		return Command{}, fmt.Errorf("unknown checkpoint %q (want claim, deliver or commit)", c.Checkpoint)
	}
	if c.Cmd == CmdFail && c.Checkpoint != "" && c.Checkpoint != protocol.CheckpointCommit {
		return Command{}, errors.New("fail is only possible at the commit checkpoint")
	}
	return c, nil
}
