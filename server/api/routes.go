package api

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// routes lists every route of the API in one place. The page routes are
// added by the web package (Config.PagesFunc).
//
//	GET    /healthz                              alive
//	GET    /api/protocol.schema.json             the event protocol as a JSON Schema
//	GET    /readyz                               the database answers
//	GET    /api/scenarios                        orderings, scripts, guards, styles, actions
//	POST   /api/sessions                         new session: its id and control token
//	GET    /api/sessions/:id                     the session's state (role from the token, if any)
//	DELETE /api/sessions/:id                     end the session             (token)
//	POST   /api/sessions/:id/commands            one command                 (token)
//	GET    /api/sessions/:id/events              events as JSON, ?since=SEQ&run=ID&limit=N
//	GET    /api/sessions/:id/events.ndjson       the whole log (or one run's) as NDJSON, to download
//	GET    /api/sessions/:id/runs                every run and its outcome
//	GET    /api/sessions/:id/runs/:run           one run
//	GET    /api/sessions/:id/ws                  WebSocket: ?since=SEQ[&token=T]
//	GET    /api/sessions/:id/runs/:run/transcript.sql   what each worker ran, in order, as SQL
//	GET    /api/recordings                       recorded runs, for when the live demo is busy
//	GET    /api/recordings/find                  the recording closest to ?ordering=&broken=&same=
//	GET    /api/recordings/:key                  one recording with its events
//	GET    /api/recordings/load                  the latest finished load lab (or the binary's), with its events
//	POST   /api/classes                          open a class: its code and the teacher's token
//	GET    /api/classes/:id                      the class                   (teacher's token)
//	DELETE /api/classes/:id                      end the class               (teacher's token)
//	GET    /api/classes/:id/board                the board, ?anonymous=1     (teacher's token)
//	GET    /api/classes/:id/handins.json         each student's last statements, result and history, ?anonymous=1 (teacher's token)
//	GET    /api/classes/:id/handins.csv          the same, as CSV, ?anonymous=1 (teacher's token)
//	POST   /api/classes/:id/run                  one run command started in every student's session (teacher's token)
//	POST   /api/classes/:id/chapter              {chapter}: the lesson opened at it on every student's page (teacher's token)
//	POST   /api/classes/join                     {code, name, token?}: the student, their token, their session
//	POST   /receiver/:key/deliveries             a live run's receiver (the workers call it)
//	GET    /receiver/:key/deliveries/:job_id     what it holds
//	GET    /receiver/:key/decisions/:job_id      what it decided
func (s *Server) routes(e *echo.Echo) {
	e.Use(middleware.Recover())
	e.Use(s.logRequests)
	e.Use(s.refuseCrossSite) // the API's writes from another site's page

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/api/stats", s.stats) // counts for `fencelab crowd`: sessions, runs, RSS, Postgres connections

	api := e.Group("/api")
	api.GET("/scenarios", s.scenarios)
	api.GET("/protocol.schema.json", s.protocolSchema)
	api.POST("/sessions", s.createSession)
	api.GET("/sessions/:id", s.getSession)
	api.DELETE("/sessions/:id", s.deleteSession, s.driver)
	api.POST("/sessions/:id/commands", s.command, s.driver)
	api.GET("/sessions/:id/events", s.events)
	api.GET("/sessions/:id/events.ndjson", s.eventsNDJSON)
	api.GET("/sessions/:id/runs", s.runs)
	api.GET("/sessions/:id/runs/:run", s.run)
	api.GET("/sessions/:id/ws", s.socket)
	api.GET("/sessions/:id/runs/:run/transcript.sql", s.transcript)
	api.GET("/recordings", s.recordings)
	api.GET("/recordings/find", s.findRecording)
	api.GET("/recordings/load", s.loadRecording)
	api.GET("/recordings/:key", s.recordingByKey)
	api.POST("/classes", s.openClass)
	api.POST("/classes/join", s.joinClass)
	api.GET("/classes/:id", s.getClass)
	api.DELETE("/classes/:id", s.endClass)
	api.POST("/classes/:id/run", s.runForClass)
	api.POST("/classes/:id/chapter", s.chapterForClass)
	api.GET("/classes/:id/board", s.classBoard)
	api.GET("/classes/:id/handins.json", func(c echo.Context) error { return s.handIns(c, false) })
	api.GET("/classes/:id/handins.csv", func(c echo.Context) error { return s.handIns(c, true) })

	s.receivers.Register(e.Group("/receiver"))
}
