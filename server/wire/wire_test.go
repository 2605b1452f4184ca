package wire_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/wire"
	"github.com/labstack/echo/v4"
)

// TestSent_TheStatusTheClientGot: the status a request's log line carries
// is the one its client got. After the header went out, a later error
// does not change it; a client gone before any answer gets none (499, in
// the log only), and no "request failed" is logged for it; an error with
// the client still there is answered as ever.
func TestSent_TheStatusTheClientGot(t *testing.T) {
	e := echo.New()
	var logs bytes.Buffer
	handle := wire.Handler(slog.New(slog.NewTextHandler(&logs, nil)))
	newContext := func(gone bool) (echo.Context, *httptest.ResponseRecorder) {
		ctx, cancel := context.WithCancel(context.Background())
		if gone {
			cancel()
		} else {
			t.Cleanup(cancel)
		}
		rec := httptest.NewRecorder()
		return e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx), rec), rec
	}

	c, _ := newContext(true)
	c.Response().WriteHeader(http.StatusOK)
	if got := wire.Sent(c, context.Canceled); got != http.StatusOK {
		t.Errorf("a page cut short by a reader who left: Sent = %d, want 200", got)
	}
	c, _ = newContext(false)
	c.Response().WriteHeader(http.StatusOK)
	if got := wire.Sent(c, errors.New("a template failed")); got != http.StatusOK {
		t.Errorf("a page cut short by a failure of ours: Sent = %d, want 200 (what the client got)", got)
	}

	c, rec := newContext(true)
	if got := wire.Sent(c, context.Canceled); got != wire.StatusClientGone {
		t.Errorf("a client gone before any answer: Sent = %d, want %d", got, wire.StatusClientGone)
	}
	handle(context.Canceled, c)
	if rec.Body.Len() != 0 || logs.Len() != 0 {
		t.Errorf("a client gone before any answer: answered %q, logged %q; want neither", rec.Body, &logs)
	}

	c, rec = newContext(false)
	err := fault.Errorf(fault.Invalid, "bad input")
	if got := wire.Sent(c, err); got != http.StatusBadRequest {
		t.Errorf("bad input: Sent = %d, want 400", got)
	}
	handle(err, c)
	if rec.Code != http.StatusBadRequest || !bytes.Contains(rec.Body.Bytes(), []byte("bad input")) {
		t.Errorf("bad input: answered %d %q", rec.Code, rec.Body)
	}
	c, _ = newContext(false)
	if got := wire.Sent(c, context.Canceled); got != http.StatusInternalServerError {
		t.Errorf("a cancelled context with the client still there (not its leaving): Sent = %d, want 500", got)
	}
}
