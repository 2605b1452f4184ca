// Package wire is JSON over HTTP for every fencelab server: strict decoding
// of requests, and errors turned into HTTP answers in exactly one place: the
// Echo HTTPErrorHandler that every fencelab HTTP server installs. It is the
// one place that chooses an HTTP status for a fault code. Bad input gets a
// 4xx and one clear sentence; nothing a user sent ever gets a 5xx.
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
)

// Body is the JSON body of every error answer.
type Body struct {
	Error  string     `json:"error"`
	Code   fault.Code `json:"code"`
	Status int        `json:"status"`
	// Detail is what a refusal says besides its sentence, for a program:
	// a reader's statement's kind and where in it Postgres stopped.
	Detail any `json:"detail,omitempty"`
}

// Detailed is an error that carries a Detail for its answer.
type Detailed interface{ ErrorDetail() any }

// DetailOf returns the Detail of the first Detailed error in err's chain
// of a 4xx answer, or nil.
func DetailOf(err error) any {
	var d Detailed
	if errors.As(err, &d) && Status(err) < 500 {
		return d.ErrorDetail()
	}
	return nil
}

// statuses is the HTTP status of each fault code.
var statuses = map[fault.Code]int{
	fault.Invalid:     http.StatusBadRequest,
	fault.NotFound:    http.StatusNotFound,
	fault.Conflict:    http.StatusConflict,
	fault.Forbidden:   http.StatusForbidden,
	fault.Busy:        http.StatusServiceUnavailable,
	fault.Limit:       http.StatusConflict,
	fault.Unavailable: http.StatusServiceUnavailable,
	fault.Gone:        http.StatusGone,
	fault.TooLarge:    http.StatusRequestEntityTooLarge,
	fault.Unsupported: http.StatusUnsupportedMediaType,
	fault.Upgrade:     http.StatusUpgradeRequired,
	fault.TooMany:     http.StatusTooManyRequests,
	fault.Internal:    http.StatusInternalServerError,
}

// Status maps an error to its HTTP status: by its fault code, or an Echo
// HTTPError's own (an unknown route, a wrong method).
func Status(err error) int {
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if s, ok := statuses[fault.CodeOf(err)]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// codeOf is the code an answer names, Echo's own errors included.
func codeOf(err error, status int) fault.Code {
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		return CodeOfStatus(status)
	}
	return fault.CodeOf(err)
}

// CodeOfStatus is the fault code an HTTP status stands for: the one
// statuses maps to it (conflict for 409 and unavailable for 503, which
// limit and busy share), else by its class — invalid for any other 4xx,
// unavailable for any other 5xx — and internal for a status that is no
// error. It reads the answer of a server that may not be ours (a
// receiver) in the closed set of codes.
func CodeOfStatus(status int) fault.Code {
	for c, s := range statuses {
		if s == status && c != fault.Limit && c != fault.Busy {
			return c
		}
	}
	switch {
	case status >= 400 && status < 500:
		return fault.Invalid
	case status >= 500 && status < 600:
		return fault.Unavailable
	}
	return fault.Internal
}

// Message returns what the user is told: the error's own sentence, except
// for an internal error, whose detail goes to the log only. (A 503 says
// which capacity is used up, or that the database is unavailable.)
func Message(err error) string {
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		if m, ok := ee.Message.(string); ok {
			return m
		}
		return http.StatusText(ee.Code)
	}
	return fault.MessageOf(err)
}

// StatusClientGone is the status a log line gives a request whose client
// went away before any answer was sent: nginx's 499, "client closed
// request". No client ever receives it.
const StatusClientGone = 499

// ClientGone reports whether err is only the request's client having gone
// away: net/http cancels a request's context when its connection closes or
// a write to it fails, and then a handler's work ends in context.Canceled
// or in that failed write. Such an error is nothing the server did wrong,
// and there is nobody left to answer.
func ClientGone(c echo.Context, err error) bool {
	if err == nil || c.Request().Context().Err() == nil {
		return false
	}
	var oe *net.OpError
	return errors.Is(err, context.Canceled) || errors.As(err, &oe)
}

// Sent returns the status a request's client got, for the request's log
// line, once its handler returned err: once the header went out (the
// response committed) it is that header's, whatever error came after it —
// a 200 page cut short by a reader who left is a 200, not a 500; before
// that, the one Handler answers err with, or StatusClientGone when there
// is nobody left to answer.
func Sent(c echo.Context, err error) int {
	switch res := c.Response(); {
	case res.Committed || err == nil:
		return res.Status
	case ClientGone(c, err):
		return StatusClientGone
	}
	return Status(err)
}

// Handler returns an Echo HTTPErrorHandler that answers JSON and logs 5xx
// to log (nil: nowhere).
// An error after the header went out cannot change the answer any more,
// and a client that went away gets none: both are the request log's to
// tell (see Sent).
func Handler(log *slog.Logger) echo.HTTPErrorHandler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(err error, c echo.Context) {
		if c.Response().Committed || ClientGone(c, err) {
			return
		}
		status := Status(err)
		switch {
		case status == http.StatusInternalServerError:
			log.Error("request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		case status >= 500:
			log.Info("refused: unavailable or at capacity", "method", c.Request().Method, "path", c.Path(), "err", err)
		}
		body := Body{Error: Message(err), Code: codeOf(err, status), Status: status, Detail: DetailOf(err)}
		if after := fault.RetryAfter(err); after > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int((after+time.Second-1)/time.Second)))
		} else if status == http.StatusServiceUnavailable {
			c.Response().Header().Set("Retry-After", "30")
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, body)
	}
}

// ReadBody reads a JSON request body of at most limit bytes.
func ReadBody(c echo.Context, limit int64) ([]byte, error) {
	r := c.Request()
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return nil, fault.Errorf(fault.Unsupported, "the body must be JSON (Content-Type: application/json)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fault.Errorf(fault.TooLarge, "the body is larger than %d bytes", limit)
		}
		return nil, fault.Errorf(fault.Invalid, "could not read the body")
	}
	return body, nil
}

// Decode reads a JSON request body into v: at most limit bytes, exactly
// one object, no unknown fields. Any problem is a 4xx with one sentence.
func Decode(c echo.Context, limit int64, v any) error {
	body, err := ReadBody(c, limit)
	if err != nil {
		return err
	}
	return DecodeBytes(body, v)
}

// DecodeBytes decodes a request body already read (ReadBody) into v, as
// Decode does: exactly one object, no unknown fields.
func DecodeBytes(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fault.Errorf(fault.Invalid, "the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fault.Errorf(fault.Invalid, "the body is not valid JSON for this route: %s", jsonError(err))
	}
	if dec.More() {
		return fault.Errorf(fault.Invalid, "the body has data after the JSON object")
	}
	return nil
}

func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// NewEcho returns an Echo instance with fencelab's error handler and no
// banner, ready for routes.
func NewEcho(log *slog.Logger) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = Handler(log)
	return e
}

// IsUpgrade reports whether a request asks for a WebSocket.
func IsUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}
