// Package wire is JSON over HTTP for every fencelab server: strict decoding
// of requests, and errors turned into HTTP answers in exactly one place: the
// Echo HTTPErrorHandler that every fencelab HTTP server installs. Bad input
// gets a 4xx and one clear sentence; nothing a user sent ever gets a 5xx.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/fencelab/fencelab/engine"
	"github.com/labstack/echo/v4"
)

// Error is an error with the HTTP status it should be answered with.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// New returns an error answered with status and msg.
func New(status int, msg string) *Error { return &Error{Status: status, Msg: msg} }

// Body is the JSON body of every error answer.
type Body struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// StatusError is an error that knows the HTTP status it is answered with.
type StatusError interface {
	error
	HTTPStatus() int
}

// Status maps an error to its HTTP status.
func Status(err error) int {
	var he *Error
	var ee *echo.HTTPError
	var se StatusError
	switch {
	case errors.As(err, &he):
		return he.Status
	case errors.As(err, &se):
		return se.HTTPStatus()
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, engine.ErrInvalidInput):
		return http.StatusBadRequest
	case errors.Is(err, engine.ErrJobNotFound):
		return http.StatusNotFound
	case errors.Is(err, engine.ErrStale), errors.Is(err, engine.ErrFenced):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// Message returns what the user is told: the error's own sentence, except
// for a 500, whose detail goes to the log only. (A 503 says which capacity
// is used up.)
func Message(err error, status int) string {
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		if m, ok := ee.Message.(string); ok {
			return m
		}
		return http.StatusText(ee.Code)
	}
	if status == http.StatusInternalServerError {
		return "internal error; the server log has the details"
	}
	// Drop the kind a sentinel puts in front ("invalid input: ", "busy: "):
	// the status says it already.
	msg := err.Error()
	var se StatusError
	if errors.As(err, &se) {
		msg = strings.TrimPrefix(msg, se.Error()+": ")
	}
	return strings.TrimPrefix(msg, engine.ErrInvalidInput.Error()+": ")
}

// Handler returns an Echo HTTPErrorHandler that answers JSON and logs 5xx.
func Handler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status := Status(err)
		switch {
		case status == http.StatusInternalServerError:
			log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		case status >= 500:
			log.Info("refused: at capacity", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		}
		body := Body{Error: Message(err, status), Status: status}
		if status == http.StatusServiceUnavailable {
			c.Response().Header().Set("Retry-After", "30")
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, body)
	}
}

// Decode reads a JSON request body into v: at most limit bytes, exactly
// one object, no unknown fields. Any problem is a 4xx with one sentence.
func Decode(c echo.Context, limit int64, v any) error {
	r := c.Request()
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return New(http.StatusUnsupportedMediaType, "the body must be JSON (Content-Type: application/json)")
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return New(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit))
		}
		return New(http.StatusBadRequest, "could not read the body: "+err.Error())
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return New(http.StatusBadRequest, "the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return New(http.StatusBadRequest, "the body is not valid JSON for this route: "+jsonError(err))
	}
	if dec.More() {
		return New(http.StatusBadRequest, "the body has data after the JSON object")
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
