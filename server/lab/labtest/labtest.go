// Package labtest checks events against the committed JSON Schema of the
// event protocol (protocol.Schema), for the tests of every package that emits
// events: the engine's lab, the server, the CLI and the browser tests.
package labtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	once     sync.Once
	compiled *jsonschema.Schema
	compErr  error
)

func schema() (*jsonschema.Schema, error) {
	once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(protocol.Schema))
		if err != nil {
			compErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource("protocol.schema.json", doc); err != nil {
			compErr = err
			return
		}
		compiled, compErr = c.Compile("protocol.schema.json")
	})
	return compiled, compErr
}

// Validate validates one encoded event against the protocol's schema and
// returns what is wrong with it, or nil.
func Validate(raw []byte) error {
	s, err := schema()
	if err != nil {
		return fmt.Errorf("the protocol schema does not compile: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// ValidateEvent encodes e as every front end receives it and validates it.
func ValidateEvent(e protocol.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return Validate(b)
}

// Events fails tb for every event of evs that does not match the schema.
func Events(tb testing.TB, evs []protocol.Event) {
	tb.Helper()
	for _, e := range evs {
		if err := ValidateEvent(e); err != nil {
			b, _ := json.Marshal(e)
			tb.Errorf("event %d (%s) breaks the protocol schema: %v\n%s", e.Seq, e.Kind, err, b)
		}
	}
}

// TapEnv is the environment variable that makes a fencelab process write
// every event it emits, as NDJSON, to the file it names (see the server's
// and the CLI's event tap). Tests set it on the binaries they start and
// check the file with File.
const TapEnv = "FENCELAB_EVENT_TAP"

// File checks every line of an NDJSON file of events against the schema
// and returns how many it read. A missing file counts as no events.
func File(tb testing.TB, path string) int {
	tb.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n, bad := 0, 0
	for sc.Scan() {
		n++
		if err := Validate(sc.Bytes()); err != nil {
			bad++
			if bad <= 5 {
				tb.Errorf("%s line %d breaks the protocol schema: %v\n%s", path, n, err, sc.Bytes())
			}
		}
	}
	if err := sc.Err(); err != nil {
		tb.Errorf("read %s: %v", path, err)
	}
	if bad > 5 {
		tb.Errorf("%s: %d events in all break the protocol schema", path, bad)
	}
	return n
}
