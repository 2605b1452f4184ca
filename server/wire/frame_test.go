package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/wire"
)

// TestFrame_EncodesItsTypesFields: each frame encodes with exactly the
// fields its type has, zero values included, and decodes back the same.
func TestFrame_EncodesItsTypesFields(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    wire.Frame
		want string
	}{
		{wire.Frame{Type: wire.FrameHello, Session: "s1", Role: "driver", LastSeq: 7, ProtocolVersion: 2, Seq: 9},
			`{"last_seq":7,"protocol_version":2,"role":"driver","session":"s1","since":0,"type":"hello"}`},
		{wire.Frame{Type: wire.FrameLive, ID: "x"}, `{"seq":0,"type":"live"}`},
		{wire.Frame{Type: wire.FrameEvent, ID: "x"}, `{"event":null,"type":"event"}`},
		{wire.ReplyFrame("1", map[string]string{"run": "r1"}, nil), `{"id":"1","ok":true,"result":{"run":"r1"},"type":"reply"}`},
		{wire.ReplyFrame("", nil, nil), `{"id":"","ok":true,"result":null,"type":"reply"}`},
		{wire.ReplyFrame("2", nil, fault.Errorf(fault.Busy, "full")), `{"code":"busy","error":"full","id":"2","ok":false,"status":503,"type":"reply"}`},
		{wire.Frame{Type: wire.FramePong, ID: ""}, `{"id":"","type":"pong"}`},
		{wire.Frame{Type: wire.FrameError, Error: "bad", ID: "3"}, `{"error":"bad","type":"error"}`},
		{wire.Frame{Type: wire.FrameCommand, ID: "1", Command: json.RawMessage(`{"action":"step"}`)}, `{"command":{"action":"step"},"id":"1","type":"command"}`},
		{wire.Frame{Type: wire.FramePing, ID: "p"}, `{"id":"p","type":"ping"}`},
	} {
		b, err := json.Marshal(c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.f.Type, err)
		}
		if string(b) != c.want {
			t.Errorf("%s frame encodes as\n %s\nwant\n %s", c.f.Type, b, c.want)
		}
		var back wire.Frame
		if err := json.Unmarshal(b, &back); err != nil || back.Type != c.f.Type {
			t.Errorf("%s frame does not decode back: %+v, %v", c.f.Type, back, err)
		}
	}
}

// TestFrame_DecodesTheEventLogsFrame: a client decodes the frame the event log
// encodes by hand into a Frame with the whole event.
func TestFrame_DecodesTheEventLogsFrame(t *testing.T) {
	t.Parallel()
	ev, _ := json.Marshal(protocol.Event{Seq: 5, V: 2, Run: "r2", Kind: protocol.KindVerdict, Verdict: &protocol.VerdictEvent{Safe: true}})
	var f wire.Frame
	if err := json.Unmarshal(append(append([]byte(`{"type":"event","event":`), ev...), '}'), &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != wire.FrameEvent || f.Event == nil || f.Event.Seq != 5 || f.Event.Run != "r2" || f.Event.Verdict == nil || !f.Event.Verdict.Safe {
		t.Errorf("decoded %+v (event %+v)", f, f.Event)
	}
}

// TestDecodeClientFrame_AllowsCommandsAndPingsAlone holds the client's
// frames to their two types and their fields, and says why a frame is
// refused.
func TestDecodeClientFrame_AllowsCommandsAndPingsAlone(t *testing.T) {
	f, err := wire.DecodeClientFrame([]byte(`{"type":"command","id":"7","command":{"action":"step"}}`))
	if err != nil || f.Type != wire.FrameCommand || f.ID != "7" || string(f.Command) != `{"action":"step"}` {
		t.Fatalf("a command: %+v, %v", f, err)
	}
	if f, err := wire.DecodeClientFrame([]byte(`{"type":"ping","id":"8"}`)); err != nil || f.Type != wire.FramePing || f.ID != "8" {
		t.Fatalf("a ping: %+v, %v", f, err)
	}
	for in, want := range map[string]string{
		`{"type":"hello"}`:                                       `unknown message type "hello"`,
		`{"type":"command","id":"1"}`:                            "needs a command object",
		`{"type":"ping","command":{"action":"step"}}`:            "a ping carries no command",
		`{"type":"ping","since":3}`:                              "a message is a JSON object like",
		`{"type":"ping"} {"type":"ping"}`:                        "there is more after it",
		`{"type":"ping","id":"` + strings.Repeat("x", 65) + `"}`: "longer than 64 characters",
		"\x00": "a message is a JSON object like",
	} {
		if _, err := wire.DecodeClientFrame([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
