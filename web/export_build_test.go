package web

// BuildView is Build it's view model, as GET /build renders it.
var BuildView = build
