package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/fencelab/fencelab/server/lab/experiments"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/web"
)

// reportDir is where `check --report DIR` writes what the check's runs
// did, to open in a browser with no server: each case's run as the
// offline replay page a session's download is (web.Replay), and an index
// that lists the failing cases first, each with what it shows broken and
// a link to its run.
type reportDir struct {
	path string

	mu     sync.Mutex
	events map[string][]protocol.Event // by run
	runs   map[string]protocol.RunInfo
}

// openReportDir makes the folder if it is missing and makes sure a file
// can be written in it, before anything runs.
func openReportDir(path string) (*reportDir, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, usagef("fencelab check: --report: cannot make %s: %v", path, errors.Unwrap(err))
	}
	f, err := os.CreateTemp(path, ".fencelab-report-*")
	if err != nil {
		return nil, usagef("fencelab check: --report: cannot write in %s: %v", path, errors.Unwrap(err))
	}
	f.Close()
	os.Remove(f.Name())
	return &reportDir{path: path, events: map[string][]protocol.Event{}, runs: map[string]protocol.RunInfo{}}, nil
}

// emit keeps an event of a case's run.
func (d *reportDir) emit(e protocol.Event) {
	if e.Run == "" {
		return
	}
	d.mu.Lock()
	d.events[e.Run] = append(d.events[e.Run], e)
	d.mu.Unlock()
}

// ended keeps a case's run's summary, as it ended.
func (d *reportDir) ended(rs protocol.RunInfo) {
	d.mu.Lock()
	d.runs[rs.ID] = rs
	d.mu.Unlock()
}

// reportCase is one case's line in the index.
type reportCase struct {
	Sign, Tone, Title, Words, File string
	OK                             bool
}

// write writes each case's run that played (n-case.html, in the
// report's order) and index.html, and returns the index's path.
func (d *reportDir) write(ctx context.Context, rep protocol.CheckReport) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cases []reportCase
	for i, c := range rep.Cases {
		m := protocol.MarkWords(c.Mark)
		rc := reportCase{Sign: m.Sign, Tone: m.Tone, Title: c.Title, OK: c.OK}
		switch {
		case len(c.Broken) > 0:
			rc.Words = c.Broken[0].Words
		case c.Error != nil:
			rc.Words = c.Title + ": the run could not finish (" + c.Error.Message + ")"
		}
		rs, ok := d.runs[c.Run]
		if evs := d.events[c.Run]; ok && len(evs) > 0 {
			rc.File = fmt.Sprintf("%d-%s.html", i+1, c.Case)
			page, err := web.Replay(fmt.Sprintf("The %s case of a fencelab check of your statements (run %s)", c.Title, c.Run), rs, evs)
			if err != nil {
				return "", err
			}
			var b bytes.Buffer
			if err := page.Render(ctx, &b); err != nil {
				return "", err
			}
			if err := writeFileWhole(filepath.Join(d.path, rc.File), b.Bytes()); err != nil {
				return "", err
			}
		}
		cases = append(cases, rc)
	}
	// The failing first: what to open first.
	slices.SortStableFunc(cases, func(a, b reportCase) int {
		switch {
		case a.OK == b.OK:
			return 0
		case !a.OK:
			return -1
		}
		return 1
	})
	var probes []reportCase
	for _, p := range rep.Probes {
		m := protocol.MarkWords(p.Mark)
		probes = append(probes, reportCase{Sign: m.Sign, Tone: m.Tone, Title: p.Title, OK: p.OK})
	}
	var b bytes.Buffer
	err := reportIndex.Execute(&b, struct {
		Words          string
		Pass           bool
		Cases, Probes  []reportCase
		Broken, Beyond []experiments.CheckBroken
	}{rep.Words, rep.Pass, cases, probes, rep.Broken, rep.Beyond})
	if err != nil {
		return "", err
	}
	index := filepath.Join(d.path, "index.html")
	return index, writeFileWhole(index, b.Bytes())
}

// writeFileWhole writes a file beside its name, then renames it over
// it: a reader never opens half of one.
func writeFileWhole(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("--report: write %s: %w", path, err)
	}
	return nil
}

// reportIndex is the index of a --report folder: self-contained, no
// script, every word escaped.
var reportIndex = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>fencelab check: {{if .Pass}}passes{{else}}fails{{end}}</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 1.5rem auto; padding: 0 1rem; color: #1d2330; background: #f6f5f1; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.05rem; margin-top: 1.4rem; }
ol, ul { padding-left: 1.3rem; } li { margin: .35rem 0; }
.safe, .ok { color: #1d6b3a; } .unsafe, .bad { color: #a3262a; } .words { display: block; color: #4a5161; }
a { color: #1d4f91; }
</style>
</head>
<body>
<h1 data-testid="report-words" class="{{if .Pass}}safe{{else}}unsafe{{end}}">{{.Words}}</h1>
<h2>Cases{{if not .Pass}}, the failing first{{end}}</h2>
<ol data-testid="report-cases">
{{range .Cases}}<li data-ok="{{.OK}}"><span class="{{.Tone}}" aria-hidden="true">{{.Sign}}</span> <strong>{{.Title}}</strong>{{if .File}} · <a href="{{.File}}">its run, replayed</a>{{else}} · no run to replay{{end}}{{if .Words}}<span class="words">{{.Words}}</span>{{end}}</li>
{{end}}</ol>
{{if .Probes}}<h2>Probes (your statements on tables set up for one question each; no run)</h2>
<ul data-testid="report-probes">
{{range .Probes}}<li data-ok="{{.OK}}"><span class="{{.Tone}}" aria-hidden="true">{{.Sign}}</span> {{.Title}}</li>
{{end}}</ul>{{end}}
{{if .Broken}}<h2>What the runs show broken</h2>
<ul data-testid="report-broken">
{{range .Broken}}<li>{{.Words}}</li>
{{end}}</ul>{{end}}
{{if .Beyond}}<h2>Beyond the article (a note, not a failure)</h2>
<ul data-testid="report-beyond">
{{range .Beyond}}<li>{{.Words}}</li>
{{end}}</ul>{{end}}
</body>
</html>
`))
