package crowd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelab/fencelab/server/run/child"
)

// ---- the child server ------------------------------------------------------------

// serveChild is the `fencelab serve` a crowd started. It leads a
// process group of its own, so a terminal's Ctrl-C reaches this command
// only, and stop shuts the server down in order after the readers: its
// runs, workers, schemas and private cluster go with it.
type serveChild struct {
	pid  int
	proc *child.Process
	url  *url.URL
	done chan struct{}   // closed once it is reaped
	wd   *child.Watchdog // nil where the parent-death signal does its job

	once    sync.Once
	stopErr error
	waitErr error // set before done is closed
	stopped bool  // it was asked to stop (not dead on its own)
}

// startServe starts `exe serve --addr 127.0.0.1:0` with the extra flags,
// this process's environment and env, and waits until it answers
// /readyz; then the child's stderr goes on to lg, line by line.
//
// The child must never outlive this process. Every return path of Run
// and RunSeries stops it; and if this process dies without returning
// (SIGKILL), Linux sends the child SIGTERM by its parent-death signal,
// and elsewhere a watchdog does (both by child.Start). SIGTERM, not
// SIGKILL: the server then stops its runs, workers and cluster itself.
func startServe(ctx context.Context, exe string, env, extra []string, lg *log.Logger) (*serveChild, error) {
	// Errors only, unless a --serve-flag says otherwise (the last flag
	// wins): at its caps the server logs a warning per busy answer.
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "error"}, extra...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	var wd *child.Watchdog
	if !child.HasParentDeath {
		var err error
		if wd, err = child.StartWatchdog(child.Config{Name: "fencelab-crowd-watchdog", Signal: syscall.SIGTERM}); err != nil {
			return nil, fmt.Errorf("crowd: %w", err)
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	c := &serveChild{done: make(chan struct{}), wd: wd}
	proc, err := child.Start(cmd, child.Options{ParentDeath: syscall.SIGTERM, Watchdog: wd})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if wd != nil {
			_ = wd.Stop()
		}
		return nil, fmt.Errorf("crowd: start fencelab serve: %w", err)
	}
	c.pid, c.proc = proc.Pid, proc
	go func() {
		c.waitErr = proc.Wait()
		close(c.done)
	}()

	// Its stdout says where it listens; its stderr is kept until it is
	// ready (to explain a failed start), then passed on line by line.
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			if m := playgroundURL.FindString(sc.Text()); m != "" {
				select {
				case urlc <- m:
				default:
				}
			}
		}
		outR.Close()
	}()
	logs := &childLog{log: lg, done: make(chan struct{})}
	go logs.copy(errR)

	fail := func(err error) (*serveChild, error) {
		c.stop()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, serveStartTimeout)
	defer cancel()
	var raw string
	select {
	case raw = <-urlc:
	case <-c.done:
		logs.wait()
		tail := logs.held()
		if ee, ok := c.waitErr.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			return fail(invalidf("--serve-flag: %s", strings.TrimPrefix(tail, "fencelab: ")))
		}
		return fail(fmt.Errorf("crowd: fencelab serve exited before it was ready (%v): %s", c.waitErr, tail))
	case <-sctx.Done():
		if ctx.Err() != nil {
			return fail(ErrInterrupted)
		}
		return fail(fmt.Errorf("crowd: fencelab serve not ready within %v: %s", serveStartTimeout, logs.held()))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fail(fmt.Errorf("crowd: fencelab serve printed %q, not its URL", raw))
	}
	c.url = &url.URL{Scheme: u.Scheme, Host: u.Host}
	if err := waitReady(sctx, c); err != nil {
		if ctx.Err() != nil {
			return fail(ErrInterrupted)
		}
		return fail(fmt.Errorf("crowd: fencelab serve at %s: %w: %s", c.url, err, logs.held()))
	}
	logs.release()
	return c, nil
}

var playgroundURL = regexp.MustCompile(`https?://[0-9A-Za-z.\[\]:]+`)

// checkReady asks a server's /readyz once.
func checkReady(ctx context.Context, base *url.URL) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("/readyz: %w", unwrapURLError(err))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: HTTP %d", resp.StatusCode)
	}
	return nil
}

// waitReady polls /readyz until it answers 200.
func waitReady(ctx context.Context, c *serveChild) error {
	for {
		if checkReady(ctx, c.url) == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("it exited (%v)", c.waitErr)
		case <-ctx.Done():
			return errors.New("/readyz does not answer")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop asks the server to shut down (SIGTERM to its process group), kills
// the group if it has not exited within serveStopTimeout, and reaps it.
// It returns an error when the server did not exit cleanly, or had exited
// on its own before it was asked. Safe to call more than once.
func (c *serveChild) stop() error {
	if c == nil { // the crowd played a server of another's: nothing to stop
		return nil
	}
	c.once.Do(func() {
		select {
		case <-c.done:
		default:
			c.stopped = true
			_ = c.proc.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(serveStopTimeout):
				_ = c.proc.Signal(syscall.SIGKILL)
				<-c.done
				c.stopErr = fmt.Errorf("did not stop within %v of SIGTERM and was killed", serveStopTimeout)
			}
		}
		if c.wd != nil {
			_ = c.wd.Stop() // it has nothing left to stop: the child is reaped
		}
		switch {
		case c.stopErr != nil:
		case !c.stopped:
			c.stopErr = fmt.Errorf("exited during the load (%v)", c.waitErr)
		case c.waitErr != nil:
			c.stopErr = fmt.Errorf("did not stop cleanly (%v)", c.waitErr)
		}
	})
	return c.stopErr
}

// childLog passes the child's stderr on, line by line, once released;
// until then it holds the last lines, to explain a failed start.
type childLog struct {
	log      *log.Logger
	done     chan struct{} // closed at the end of the child's stderr
	mu       sync.Mutex
	lines    []string
	released bool
}

func (l *childLog) copy(r io.ReadCloser) {
	defer close(l.done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<10), 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		if l.released {
			l.log.Printf("serve: %s", sc.Text())
		} else if l.lines = append(l.lines, sc.Text()); len(l.lines) > 20 {
			l.lines = l.lines[1:]
		}
		l.mu.Unlock()
	}
}

// wait waits, briefly, for the child's stderr to reach its end.
func (l *childLog) wait() {
	select {
	case <-l.done:
	case <-time.After(time.Second):
	}
}

func (l *childLog) held() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "it printed nothing"
	}
	return strings.Join(l.lines, "; ")
}

func (l *childLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released, l.lines = true, nil
}
