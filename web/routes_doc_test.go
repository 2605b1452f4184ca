package web_test

import (
	"strings"
	"testing"

	"github.com/fencelab/fencelab/server/servertest"
	"github.com/fencelab/fencelab/web"
	"github.com/labstack/echo/v4"
)

// TestRoutes_PagesAsREFERENCESaysThem: every page route is in
// REFERENCE.md's API table, and every route the table names outside the
// API (the server's own test holds those) is a page the server has.
func TestRoutes_PagesAsREFERENCESaysThem(t *testing.T) {
	e := echo.New()
	web.Register(web.Options{})(e, nil)
	documented := servertest.DocumentedRoutes(t)
	has := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Method == echo.RouteNotFound {
			continue
		}
		k := r.Method + " " + r.Path
		has[k] = true
		if !documented[k] {
			t.Errorf("the server has the page %s, which REFERENCE.md's API table does not name", k)
		}
	}
	for k := range documented {
		_, path, _ := strings.Cut(k, " ")
		api := strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/receiver/") || path == "/healthz" || path == "/readyz"
		if !api && !has[k] {
			t.Errorf("REFERENCE.md's API table names the page %s, which the server does not have", k)
		}
	}
}
