package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
)

// FrameType says what a session socket's frame is, and so which of
// Frame's fields it has.
type FrameType string

// The frames of a session's socket (GET /api/sessions/{id}/ws).
const (
	// Server to client.
	FrameHello FrameType = "hello" // Session, Role, Since, LastSeq, ProtocolVersion
	FrameEvent FrameType = "event" // Event: every event after since, in order, then live ones
	FrameLive  FrameType = "live"  // Seq: the backlog is sent; from here on, events are live
	FrameReply FrameType = "reply" // ID, OK; then Result, or Status, Code and Error
	FramePong  FrameType = "pong"  // ID
	FrameError FrameType = "error" // Error: a message that could not be read; nothing happened

	// Client to server.
	FrameCommand FrameType = "command" // ID, Command (drivers only)
	FramePing    FrameType = "ping"    // ID
)

// Frame is one message of a session's socket, either way: a JSON object
// whose "type" says which other fields it has (see the FrameType
// constants). The server writes its frames as Frames (the event log encodes
// each event frame once itself, in the same shape); a client such as
// cmd/internal/crowd decodes every frame it reads into one.
//
// A Frame encodes with exactly its type's fields, zero values included
// ("since":0, "ok":false), and nothing else; it decodes leniently, as a
// reader takes the fields its type has and ignores the rest.
type Frame struct {
	Type FrameType `json:"type"`
	// ID is a client message's id, which its reply or pong repeats.
	ID string `json:"id,omitempty"`

	// hello
	Session         string `json:"session,omitempty"`
	Role            string `json:"role,omitempty"` // driver or viewer
	Since           int64  `json:"since,omitempty"`
	LastSeq         int64  `json:"last_seq,omitempty"`
	ProtocolVersion int    `json:"protocol_version,omitempty"`

	// live: the seq of the last event of the backlog (since, if none).
	Seq int64 `json:"seq,omitempty"`

	// event
	Event *protocol.Event `json:"event,omitempty"`

	// reply: OK, then Result (the command's result), or the error's
	// HTTP-like Status, its Code and its sentence. Error is also the
	// sentence of an error frame.
	OK     bool            `json:"ok,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Status int             `json:"status,omitempty"`
	Code   fault.Code      `json:"code,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Detail is what a refusal says besides its sentence (DetailOf).
	Detail any `json:"detail,omitempty"`

	// command: the command object (server/run/control decodes it).
	Command json.RawMessage `json:"command,omitempty"`
}

// ReplyFrame is the reply to the client message id: its result, or err,
// whose status, code and words are those an HTTP answer of it would have.
func ReplyFrame(id string, result any, err error) Frame {
	if err != nil {
		return Frame{Type: FrameReply, ID: id, Status: Status(err), Code: codeOf(err, Status(err)), Error: Message(err), Detail: DetailOf(err)}
	}
	b, merr := json.Marshal(result)
	if merr != nil {
		return ReplyFrame(id, nil, fault.Errorf(fault.Internal, "encode the result: %v", merr))
	}
	return Frame{Type: FrameReply, ID: id, OK: true, Result: b}
}

// MarshalJSON encodes the frame with exactly its type's fields.
func (f Frame) MarshalJSON() ([]byte, error) {
	m := map[string]any{"type": f.Type}
	switch f.Type {
	case FrameHello:
		m["session"], m["role"], m["since"], m["last_seq"], m["protocol_version"] = f.Session, f.Role, f.Since, f.LastSeq, f.ProtocolVersion
	case FrameEvent:
		m["event"] = f.Event
	case FrameLive:
		m["seq"] = f.Seq
	case FrameReply:
		m["id"], m["ok"] = f.ID, f.OK
		if f.OK {
			m["result"] = f.Result // nil encodes as null
		} else {
			m["status"], m["code"], m["error"] = f.Status, f.Code, f.Error
			if f.Detail != nil {
				m["detail"] = f.Detail
			}
		}
	case FramePong, FramePing:
		m["id"] = f.ID
	case FrameError:
		m["error"] = f.Error
	case FrameCommand:
		m["id"], m["command"] = f.ID, f.Command
	}
	return json.Marshal(m)
}

// DecodeClientFrame reads one frame a client sent, strictly: a command or
// a ping, with no field their types do not have. Its error is the
// sentence an error frame answers with.
func DecodeClientFrame(b []byte) (Frame, error) {
	var m struct {
		Type    FrameType       `json:"type"`
		ID      string          `json:"id,omitempty"`
		Command json.RawMessage `json:"command,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Frame{}, errors.New(`a message is a JSON object like {"type":"command","id":"1","command":{"action":"step"}}`)
	}
	if dec.More() {
		return Frame{}, errors.New("a message is one JSON object; there is more after it")
	}
	if len(m.ID) > 64 {
		return Frame{}, errors.New("the message id is longer than 64 characters")
	}
	switch m.Type {
	case FramePing:
		if len(m.Command) > 0 {
			return Frame{}, errors.New("a ping carries no command")
		}
	case FrameCommand:
		if len(m.Command) == 0 {
			return Frame{}, errors.New("a command message needs a command object")
		}
	default:
		return Frame{}, fmt.Errorf("unknown message type %q (want command or ping)", m.Type)
	}
	return Frame{Type: m.Type, ID: m.ID, Command: m.Command}, nil
}
