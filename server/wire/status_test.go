package wire

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencelab/fencelab/server/fault"
	"github.com/labstack/echo/v4"
)

// Every code's status reads back as the code, but for the two that share
// another's status (limit a 409, busy a 503), which read as that one; a
// status no code has reads by its class.
func TestCodeOfStatus_IsStatusesReadBack(t *testing.T) {
	for code, status := range statuses {
		want := code
		switch code {
		case fault.Limit:
			want = fault.Conflict
		case fault.Busy:
			want = fault.Unavailable
		}
		if got := CodeOfStatus(status); got != want {
			t.Errorf("CodeOfStatus(%d) = %s, want %s", status, got, want)
		}
	}
	for status, want := range map[int]fault.Code{418: fault.Invalid, 422: fault.Invalid, 502: fault.Unavailable, 504: fault.Unavailable, 200: fault.Internal, 302: fault.Internal, 0: fault.Internal, 99999: fault.Internal} {
		if got := CodeOfStatus(status); got != want {
			t.Errorf("CodeOfStatus(%d) = %s, want %s", status, got, want)
		}
	}
}

// An Echo with no logger still answers a 500 and a 503 as JSON: nil logs
// nowhere, it does not panic the request away.
func TestNewEcho_ANilLoggerStillAnswers(t *testing.T) {
	e := NewEcho(nil)
	e.GET("/internal", func(echo.Context) error { return errors.New("boom") })
	e.GET("/busy", func(echo.Context) error { return fault.Errorf(fault.Busy, "full") })
	for path, want := range map[string]int{"/internal": 500, "/busy": 503} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var b Body
		if rec.Code != want || json.Unmarshal(rec.Body.Bytes(), &b) != nil || b.Status != want {
			t.Errorf("%s: HTTP %d %q, want a JSON %d", path, rec.Code, rec.Body.String(), want)
		}
	}
}
