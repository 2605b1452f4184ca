package main

import (
	"context"
	"io"
)

func serveCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return usagef("fencelab serve: the playground server is not built yet (it comes with the server issue); for now run: fencelab run --ordering zombie-first")
}
