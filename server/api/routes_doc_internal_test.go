package api

import (
	"slices"
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/run/receiver"
	"github.com/fencelab/fencelab/server/servertest"
	"github.com/labstack/echo/v4"
)

// TestRoutes_AsREFERENCESaysThem: every route of the API is in
// REFERENCE.md's API table, and every route the table names outside the
// pages (web's own test holds those) is one the server has.
func TestRoutes_AsREFERENCESaysThem(t *testing.T) {
	e := echo.New()
	s := &Server{receivers: receiver.NewRegistry("http://127.0.0.1/receiver")}
	s.routes(e)
	documented := servertest.DocumentedRoutes(t)
	has := map[string]bool{}
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Name, "echo_route_not_found") || r.Method == echo.RouteNotFound {
			continue
		}
		k := r.Method + " " + r.Path
		has[k] = true
		if !documented[k] {
			t.Errorf("the server has %s, which REFERENCE.md's API table does not name", k)
		}
	}
	var names []string
	for k := range documented {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		_, path, _ := strings.Cut(k, " ")
		if !has[k] && (strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/receiver/") || path == "/healthz" || path == "/readyz") {
			t.Errorf("REFERENCE.md's API table names %s, which the server does not have", k)
		}
	}
}
