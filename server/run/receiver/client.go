package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/wire"
)

// Client reads a receiver over its HTTP API: a standalone one, or a run's
// on a server's Registry (BaseURL BASE/KEY, and HTTP WithCredential). It
// is a judge.ReceiverView, so a run's outcome can be read from a receiver
// that lives in another process with another database. Its errors never
// carry BaseURL, whose path may hold a run's secret key.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8081
	HTTP    *http.Client
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.BaseURL, "/")+path, nil)
	if err != nil {
		return errors.New("the receiver URL is not usable")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("the receiver did not answer %s: %w", path, withoutURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("the receiver's answer to %s broke off (HTTP %d)", path, resp.StatusCode)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("the receiver: %s: %w", path, engine.ErrJobNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("the receiver answered %s with HTTP %d: %s", path, resp.StatusCode, answerError(body, resp.StatusCode))
	}
	return json.Unmarshal(body, v)
}

// Get reads what the receiver holds for a job.
func (c *Client) Get(ctx context.Context, jobID int64) (engine.Held, error) {
	var h engine.Held
	err := c.get(ctx, fmt.Sprintf("/deliveries/%d", jobID), &h)
	return h, err
}

// Decisions reads the receiver's decisions for a job.
func (c *Client) Decisions(ctx context.Context, jobID int64) ([]engine.DecisionRecord, error) {
	var ds []engine.DecisionRecord
	err := c.get(ctx, fmt.Sprintf("/decisions/%d", jobID), &ds)
	return ds, err
}

// WithCredential returns a client like hc whose every request carries the
// credential a run issued to its sender (Served.Credential), as
// "Authorization: Bearer …". An empty credential adds nothing.
func WithCredential(hc *http.Client, credential string) *http.Client {
	if credential == "" {
		return hc
	}
	c := *hc
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.Transport = bearer{base: base, value: "Bearer " + credential}
	return &c
}

type bearer struct {
	base  http.RoundTripper
	value string
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", b.value)
	return b.base.RoundTrip(req)
}

// Call sends one delivery, as Post does, and tells what came of it in ce
// (its result, decision, held epoch, HTTP status and any failure). It
// returns the receiver's database time of the decision and, for a refusal,
// an *engine.StaleError.
func Call(ctx context.Context, hc *http.Client, url string, body []byte, ce *protocol.CallEvent) (time.Time, error) {
	rc, status, err := Post(ctx, hc, url, body)
	ce.HTTPStatus = status
	switch {
	case err != nil && status < 400: // no answer, or one that broke off or was no receipt
		ce.Result, ce.Error = protocol.DeliveryFailed, &protocol.Failure{Code: protocol.ErrUnreachable, Message: err.Error()}
		return rc.DBTime, err
	case err != nil: // it answered with an error: its status says why, in the closed set of codes
		ce.Result, ce.Error = protocol.DeliveryFailed, &protocol.Failure{Code: protocol.ErrorCode(wire.CodeOfStatus(status)), Message: err.Error()}
		return rc.DBTime, err
	case status == http.StatusConflict:
		ce.Result, ce.Decision, ce.HeldEpoch = protocol.DeliveryRefused, protocol.DecisionOf(rc.Decision), protocol.Int64(rc.HeldEpoch)
		return rc.DBTime, &engine.StaleError{JobID: ce.JobID, Epoch: ce.Epoch, HeldEpoch: rc.HeldEpoch}
	}
	ce.Result, ce.Decision, ce.HeldEpoch = protocol.DeliveryAccepted, protocol.DecisionOf(rc.Decision), protocol.Int64(rc.HeldEpoch)
	return rc.DBTime, nil
}

// Post sends one delivery to a receiver's deliveries URL and decodes its
// answer: 200 (taken) and 409 (refused as stale) both carry a receipt. Its
// errors never carry the URL, whose path may hold a run's secret key.
func Post(ctx context.Context, hc *http.Client, url string, body []byte) (engine.Receipt, int, error) {
	var rc engine.Receipt
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return rc, 0, errors.New("the receiver URL is not usable")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return rc, 0, fmt.Errorf("the receiver did not answer: %v", withoutURL(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rc, resp.StatusCode, fmt.Errorf("the receiver's answer broke off (HTTP %d)", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		return rc, resp.StatusCode, fmt.Errorf("the receiver answered HTTP %d: %s", resp.StatusCode, answerError(b, resp.StatusCode))
	}
	if err := json.Unmarshal(b, &rc); err != nil {
		return rc, resp.StatusCode, fmt.Errorf("the receiver answered HTTP %d with a body that is not a receipt", resp.StatusCode)
	}
	return rc, resp.StatusCode, nil
}

// withoutURL is a failed request's error without the URL it was sent to
// ("Post <url>: <why>") or the address it dialled ("dial tcp <addr>:
// <why>"): a run's receiver URL holds its secret key.
func withoutURL(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return err
}

// answerError is the sentence of an error answer's JSON body (wire.Body's
// error), without its full stop, or the status's text for a body that
// has none.
func answerError(body []byte, status int) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e) // a body that is not JSON still has a status
	if e.Error == "" {
		e.Error = http.StatusText(status)
	}
	return strings.TrimSuffix(e.Error, ".")
}
