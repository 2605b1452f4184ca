package main

import (
	"context"
	"io"
)

const serveSummary = `The playground server. Not built yet: it comes with the server issue.
Until then, run a scenario end to end with: fencelab run --ordering zombie-first`

func serveCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", serveSummary, stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	return usagef("fencelab serve: the playground server is not built yet (it comes with the server issue); for now run: fencelab run --ordering zombie-first")
}
