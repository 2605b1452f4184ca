// Package e2e holds fencelab's browser tests: they build the fencelab
// binary, start `fencelab serve` against the test PostgreSQL, open the
// playground in headless Chromium through chromedp and drive it the way a
// person would, by data-testid.
//
// The suite is five packages, so that each stays well inside go test's
// ten minutes a package on a loaded 2-core machine, and go test runs them
// side by side:
//
//   - e2e (this one): the page — the article's table, orderings, guards,
//     the matrix, the keyboard, layout, accessibility;
//   - e2e/room: the page as a room and a blog use it — the lesson, present
//     mode, a student watching, embeds, sharing, exports, a busy server;
//   - e2e/buildit: Build it and Check it in the page;
//   - e2e/engines: the core of the page in WebKit and Firefox too;
//   - e2e/loadlab: the load lab against the checkers' counts.
//
// Their harness is the package e2e/e2etest, which nothing but these tests
// imports:
//
//   - e2etest.StartServer(t, args...) starts one `fencelab serve` for a test
//     (share one among cases by starting it in the parent test and using it
//     from subtests, through srv.WithT(t));
//   - e2etest.NewTab(t, width, height, opts...) opens a tab in the one browser of
//     the test binary, and fails the test on any JavaScript exception,
//     console.error or browser-log error (AllowErrors and ExpectErrors
//     relax that), saving a full-page screenshot in e2e/artifacts/ when the
//     test fails;
//   - the Tab's helpers (Click, SetValue, Press, PollState, …) select by
//     data-testid and wait without sleeping.
//
// Run them with
//
//	go test ./e2e/... -count=1 -v
//
// Every test calls t.Parallel: each has its own servers, tabs and browser
// profiles (the one Chromium is shared), and four run at once unless
// -parallel says otherwise (e2etest.Main), since they mostly wait on real
// leases and pages. A new test does the same, or says why it cannot.
//
// They need Chromium (apt-get install chromium chromium-driver) and the
// PostgreSQL server binaries, or DATABASE_URL. TestEngines runs the core
// cases in WebKit (WebKitWebDriver, on an Xvfb the test starts) and Firefox
// ESR (WebDriver BiDi) too (apt-get install webkit2gtk-driver xvfb xauth
// firefox-esr). Without a browser the tests skip, except with CI=true,
// where they fail.
package e2e
