package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/sandbox"
)

const probeSummary = `Asks a running fencelab server whether it is alive: exits 0 when --url
answers 2xx within --timeout, 1 otherwise. The Docker image's HEALTHCHECK uses it.

With --play it asks more of the server at --url, as a reader would, through
its API alone: the article's two orderings, each a real run that must end as
the article's table says, and a check of our statements, which must pass.
It prints a line for each and exits 1 when one does not; the sessions it
opened are ended. A deployment's smoke test: CI plays it against the Docker
image.`

func probeCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", probeSummary, stderr)
	port := getenv("PORT")
	if port == "" {
		port = "8080"
	}
	target := fs.String("url", "http://127.0.0.1:"+port+"/healthz", "the URL to ask (with --play, the server's: its path is ignored)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer (with --play, for all of it: at least 30s is sensible)")
	play := fs.Bool("play", false, "play the article's two orderings and a check of our statements through the API, and judge them")
	if err := parse(fs, args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("fencelab probe: --url %q is not an http(s) URL", *target)
	}
	limit := time.Minute
	if *play {
		limit = 10 * time.Minute
	}
	if *timeout <= 0 || *timeout > limit {
		return usagef("fencelab probe: --timeout %v must be between 0 and %v", *timeout, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *play {
		return probePlay(ctx, &url.URL{Scheme: u.Scheme, Host: u.Host}, stdout)
	}
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

// probePlay plays the article's two orderings and a check of our
// statements on the server at base, each in a session of its own, and
// returns an error naming every one that did not end as the article says.
func probePlay(ctx context.Context, base *url.URL, stdout io.Writer) error {
	c := &apiClient{base: base, ctx: ctx}
	var failed []string
	for _, o := range []experiments.Ordering{experiments.NewOwnerFirst, experiments.ZombieFirst} {
		line, err := c.playOrdering(o)
		if err != nil {
			line = err.Error()
			failed = append(failed, string(o))
		}
		fmt.Fprintf(stdout, "%-18s %s\n", o, line)
	}
	line, err := c.playCheck(sandbox.Ours())
	if err != nil {
		line = err.Error()
		failed = append(failed, "check")
	}
	fmt.Fprintf(stdout, "%-18s %s\n", "check (ours)", line)
	if len(failed) > 0 {
		return fmt.Errorf("probe %s: not as the article says: %s", base, strings.Join(failed, ", "))
	}
	return nil
}

// apiClient is a reader of the playground's JSON API, as a program outside
// the server sees it.
type apiClient struct {
	base *url.URL
	ctx  context.Context
}

// do sends one request and decodes a 2xx answer's JSON into out.
func (c *apiClient) do(method, path, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base.String()+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: HTTP %d: %.200s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// session opens a session and returns it with a func that ends it.
func (c *apiClient) session() (id, token string, end func(), err error) {
	var s struct{ ID, Token string }
	if err := c.do(http.MethodPost, "/api/sessions", "", struct{}{}, &s); err != nil {
		return "", "", nil, err
	}
	end = func() {
		// Ended even when the probe's own time is up: a server is left as found.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 10*time.Second)
		defer cancel()
		(&apiClient{base: c.base, ctx: ctx}).do(http.MethodDelete, "/api/sessions/"+s.ID, s.Token, nil, nil)
	}
	return s.ID, s.Token, end, nil
}

// poll calls try every 200 ms until it reports done or the probe's time is up.
func (c *apiClient) poll(what string, try func() (bool, error)) error {
	for {
		done, err := try()
		if done || err != nil {
			return err
		}
		select {
		case <-c.ctx.Done():
			return fmt.Errorf("no %s before the probe's --timeout", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// playOrdering runs one ordering with every guard on and says how it ended,
// or why that is not the article's.
func (c *apiClient) playOrdering(o experiments.Ordering) (string, error) {
	id, token, end, err := c.session()
	if err != nil {
		return "", err
	}
	defer end()
	var started struct{ Run string }
	if err := c.do(http.MethodPost, "/api/sessions/"+id+"/commands", token, map[string]any{"action": "run", "ordering": o}, &started); err != nil {
		return "", err
	}
	var out *protocol.Outcome
	err = c.poll("end of run "+started.Run, func() (bool, error) {
		var run struct {
			Phase   protocol.RunPhase
			Outcome *protocol.Outcome
		}
		if err := c.do(http.MethodGet, "/api/sessions/"+id+"/runs/"+started.Run, "", nil, &run); err != nil {
			return false, err
		}
		switch run.Phase {
		case protocol.PhaseFinished:
			out = run.Outcome
			return true, nil
		case protocol.PhaseFailed, protocol.PhaseStopped:
			return false, fmt.Errorf("run %s ended %s, with no outcome", started.Run, run.Phase)
		}
		return false, nil
	})
	if err != nil {
		return "", err
	}
	if out == nil || len(out.Table) == 0 {
		return "", errors.New("the finished run has no outcome")
	}
	var cells []string
	as := out.Safe
	for _, cell := range out.Table {
		cells = append(cells, cell.Words)
		as = as && cell.AsCorrect
	}
	line := strings.Join(cells, " | ")
	if !as {
		return "", fmt.Errorf("%s (the article's: %s)", line, expectedCells(out.Table))
	}
	return line, nil
}

func expectedCells(t []protocol.Cell) string {
	var cells []string
	for _, cell := range t {
		cells = append(cells, cell.Expected)
	}
	return strings.Join(cells, " | ")
}

// playCheck checks a solution and says how it came out, or why it did not pass.
func (c *apiClient) playCheck(sol sandbox.Solution) (string, error) {
	id, token, end, err := c.session()
	if err != nil {
		return "", err
	}
	defer end()
	if err := c.do(http.MethodPost, "/api/sessions/"+id+"/commands", token, map[string]any{"action": "check", "solution": sol}, nil); err != nil {
		return "", err
	}
	var report *protocol.CheckReport
	var since int64
	err = c.poll("finished check", func() (bool, error) {
		var page struct {
			Events  []protocol.Event `json:"events"`
			LastSeq int64            `json:"last_seq"`
		}
		if err := c.do(http.MethodGet, fmt.Sprintf("/api/sessions/%s/events?since=%d", id, since), "", nil, &page); err != nil {
			return false, err
		}
		since = max(since, page.LastSeq)
		for _, e := range page.Events {
			if e.Kind != protocol.KindBatch || e.Batch == nil || e.Batch.Name != experiments.BatchCheck {
				continue
			}
			switch e.Batch.Phase {
			case protocol.BatchFinished:
				report = e.Batch.Check
				return true, nil
			case protocol.BatchStopped:
				return false, fmt.Errorf("the check stopped: %s", e.Batch.Answer)
			}
		}
		return false, nil
	})
	if err != nil {
		return "", err
	}
	if report == nil {
		return "", errors.New("the finished check carries no report")
	}
	if !report.Pass {
		return "", fmt.Errorf("does not pass: %s", report.Words)
	}
	return fmt.Sprintf("%s (%d cases)", report.Words, len(report.Cases)), nil
}
