package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

const probeSummary = `Asks a running fencelab server whether it is alive: exits 0 when --url
answers 2xx within --timeout, 1 otherwise. The Docker image's HEALTHCHECK uses it.`

func probeCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", probeSummary, stderr)
	port := getenv("PORT")
	if port == "" {
		port = "8080"
	}
	target := fs.String("url", "http://127.0.0.1:"+port+"/healthz", "the URL to ask")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("fencelab probe: --url %q is not an http(s) URL", *target)
	}
	if *timeout <= 0 || *timeout > time.Minute {
		return usagef("fencelab probe: --timeout %v must be between 0 and 1m", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, *target, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", *target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe %s: HTTP %d", *target, resp.StatusCode)
	}
	fmt.Fprintf(stdout, "%s: HTTP %d\n", *target, resp.StatusCode)
	return nil
}
