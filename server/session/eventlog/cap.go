package eventlog

import (
	"encoding/json"
	"fmt"

	"github.com/fencelab/fencelab/server/lab/protocol"
)

// capEvent encodes e and, when the encoding is over max bytes, cuts its
// longest strings until it is not: each cut string keeps its start and
// ends with a note of how many bytes were cut ("… [cut: 2097100 more
// bytes]"), so a reader sees that it was cut and by how much. It returns
// the event as it is kept and its encoding; the two always agree.
func capEvent(e protocol.Event, max int) (protocol.Event, []byte) {
	ev, _ := json.Marshal(e) // an Event always encodes
	if len(ev) <= max {
		return e, ev
	}
	var tree any
	if json.Unmarshal(ev, &tree) != nil {
		return e, ev
	}
	for limit := max / 4; limit >= 64; limit /= 2 {
		tree = cutStrings(tree, limit)
		out, err := json.Marshal(tree)
		if err != nil {
			break
		}
		var cut protocol.Event
		if json.Unmarshal(out, &cut) != nil {
			break
		}
		if len(out) <= max {
			again, _ := json.Marshal(cut)
			return cut, again
		}
	}
	// Nothing long to cut (an event of very many short parts): it is kept
	// as a note of its kind and size alone.
	n := protocol.Event{V: e.V, Seq: e.Seq, Run: e.Run, At: e.At, Actor: e.Actor, Kind: protocol.KindNote,
		Note: &protocol.NoteEvent{Code: protocol.NoteOutput, Line: fmt.Sprintf("a %s event of %d bytes, over the %d an event may hold, was not kept", e.Kind, len(ev), max)}}
	out, _ := json.Marshal(n)
	return n, out
}

// cutStrings shortens every string in a decoded JSON value longer than
// limit bytes, at a character boundary.
func cutStrings(v any, limit int) any {
	switch x := v.(type) {
	case string:
		return protocol.Cut(x, limit)
	case []any:
		for i := range x {
			x[i] = cutStrings(x[i], limit)
		}
	case map[string]any:
		for k := range x {
			x[k] = cutStrings(x[k], limit)
		}
	}
	return v
}
