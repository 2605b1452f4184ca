package protocol

import (
	_ "embed"
)

// Schema is the event protocol as a JSON Schema (draft 2020-12): what
// every Event holds, kind by kind. It is generated from protocol.go and the
// types it uses, and the tests check every event they emit against it.
//
//go:embed protocol.schema.json
var Schema []byte
