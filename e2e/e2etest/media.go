package e2etest

import (
	"context"
	"sort"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// EmulateMedia sets CSS media features of the tab, such as
// {"prefers-color-scheme": "dark"} or {"prefers-reduced-motion": "reduce"}.
func (tab *Tab) EmulateMedia(features map[string]string) {
	tab.t.Helper()
	var fs []*emulation.MediaFeature
	for k, v := range features {
		fs = append(fs, &emulation.MediaFeature{Name: k, Value: v})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].Name < fs[j].Name })
	err := tab.Do(DefaultTimeout, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{Features: fs})
		return err
	}))
	if err != nil {
		tab.t.Fatalf("e2e: emulate %v: %v", features, err)
	}
}

// NavigateStatus loads url and returns its HTTP status, whatever it is,
// for pages that answer with an error status on purpose (a busy server).
func (tab *Tab) NavigateStatus(url string) int64 {
	tab.t.Helper()
	resp, err := RunAction(tab, DefaultTimeout, chromedp.NavigateResponse(url))
	if err != nil {
		tab.t.Fatalf("e2e: NavigateStatus(%s): %v", url, err)
	}
	if resp == nil {
		return 0
	}
	return resp.Status
}
