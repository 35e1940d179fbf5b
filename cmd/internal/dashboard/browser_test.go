package dashboard

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// EnvRequireBrowser, when set (make test sets it), makes the browser tests
// fail instead of skipping when no Chromium is installed.
const EnvRequireBrowser = "PELWARDEN_REQUIRE_BROWSER"

// chromium returns the path of a Chromium, or skips the test (fails with
// EnvRequireBrowser set).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: install it with apt-get install --no-install-recommends chromium (.ci/run does)"
	if os.Getenv(EnvRequireBrowser) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium tab that records what a page must not do:
// throw, log an error, or load anything from another host.
type browser struct {
	ctx  context.Context
	host string

	mu       sync.Mutex
	problems []string
}

// newBrowser opens a tab allowed to load from host only (host:port). On
// failure it saves a screenshot under testdata/failures.
func newBrowser(t *testing.T, host string) *browser {
	t.Helper()
	b := &browser{host: host}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(b.observe))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, cdplog.Enable, cdp.Empty{})
	require.NoError(t, err)
	b.ctx = ctx
	t.Cleanup(func() { // runs before the tab closes (cleanups run last first)
		if !t.Failed() {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Logf("no failure screenshot: %v", err)
			return
		}
		dir := filepath.Join("testdata", "failures")
		_ = os.MkdirAll(dir, 0o755)
		p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
		if err := os.WriteFile(p, png, 0o644); err == nil {
			t.Logf("failure screenshot: %s", p)
		}
	})
	return b
}

// observe runs in the tab's event loop: record, return fast.
func (b *browser) observe(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		problem = fmt.Sprintf("exception: %s at %s:%d", d.Text, d.URL, d.LineNumber+1)
		if d.Exception != nil {
			problem += ": " + d.Exception.Description
		}
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, a.Description+string(a.Value))
			}
			problem = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
			problem = fmt.Sprintf("browser log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		u, err := url.Parse(ev.Request.URL)
		if err != nil || (u.Scheme != "data" && u.Scheme != "about" && u.Host != b.host) {
			problem = "request to another host: " + ev.Request.URL
		}
	}
	if problem != "" {
		b.mu.Lock()
		b.problems = append(b.problems, problem)
		b.mu.Unlock()
	}
}

// run runs steps with a bound.
func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...), what)
}

// settled waits until htmx has swapped, settled and processed what it
// loaded, so that a click on new content goes through htmx (a click in the
// few ms before that would submit a form natively and load a new page).
func settled() chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](`!document.querySelector(".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added")`)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, t)
		return chromedp.Void{}, err
	}
}

// clickSwapped clicks the first element sel matches inside a fragment htmx
// polls and swaps: it finds the element and computes where it is in one
// evaluation in the page, then presses the mouse there, as a user does.
// chromedp.Click finds the node, then asks for its box in further calls,
// and a swap in between fails those with "No node with given id found";
// the mouse lands on the new copy of the element instead.
func clickSwapped(sel string) chromedp.Action[chromedp.Void] {
	type point struct {
		X float64 `json:"x"`
		Y float64 `json:"y"`
	}
	find := chromedp.PollFunction[point](`(sel) => {
		const e = document.querySelector(sel);
		if (!e) return null;
		e.scrollIntoView({block: "center", inline: "center"});
		const r = e.getBoundingClientRect();
		return {x: r.left + r.width / 2, y: r.top + r.height / 2};
	}`, chromedp.WithPollingArgs(sel), chromedp.WithPollingTimeout(0))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		p, err := find(ctx, t)
		if err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.MouseClickXY(p.X, p.Y)(ctx, t)
	}
}

// text reads the text of the first element sel matches, once there is one.
// It finds the element and reads it in one evaluation in the page:
// chromedp.Text finds the node, then reads it in a second call, and a
// polled fragment swapped in between (every 0.5 s) fails that call with
// "No node with given id found".
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	type found struct {
		Text string `json:"text"`
	}
	v, err := chromedp.Run(ctx, chromedp.PollFunction[found](
		`(sel) => { const e = document.querySelector(sel); return e ? {text: e.innerText} : null; }`,
		chromedp.WithPollingArgs(sel), chromedp.WithPollingTimeout(0)))
	require.NoError(t, err, sel)
	return v.Text
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// noProblems checks that nothing was thrown, logged as an error or loaded
// from another host.
func (b *browser) noProblems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems)
}

// The path an operator takes, in a real browser: the overview, a group, its
// dead letters, a redrive of two selected records with its confirmation,
// and the dead-letter count going down on the page without a reload. No
// JavaScript error, no request to another host.
func TestBrowser(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	sc := seed(t, rdb, "browser", 30, 5)
	_, ts := newTest(t, rdb, Options{Streams: sc.Stream, Refresh: 300 * time.Millisecond, MinIdle: time.Millisecond})
	u, err := url.Parse(ts.URL)
	require.NoError(t, err)
	b := newBrowser(t, u.Host)

	b.run(t, "overview", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS("a.group-link")))
	require.Contains(t, b.text(t, "table.groups tbody"), "{browser}")
	require.Equal(t, "25", b.text(t, "table.groups td.pending"))
	// htmx loaded and polls the table in place.
	require.True(t, eval[bool](t, b, `typeof htmx === "object" && htmx.version === "`+HTMXVersion+`"`))

	b.run(t, "group", clickSwapped("a.group-link"), chromedp.WaitVisible(chromedp.CSS("table.pel-table")))
	require.Equal(t, "25", b.text(t, "#live dd.pending"))
	require.Contains(t, b.text(t, "table.consumers"), "stalled")

	b.run(t, "dead letters", clickSwapped(`#live a[href*="deadletters"]`), chromedp.WaitVisible(chromedp.CSS("table.dead")))
	require.Equal(t, "5 records", b.text(t, "#dlq-length .count"))
	eval[chromedp.Void](t, b, `window.pelwardenMarker = 42; window.pelwardenLog = [];
		["htmx:afterRequest", "htmx:sendError", "htmx:responseError", "htmx:swapError"].forEach(function (n) {
			document.body.addEventListener(n, function (e) {
				var x = e.detail && e.detail.xhr;
				window.pelwardenLog.push(new Date().toISOString() + " " + n + " " + (e.detail && e.detail.pathInfo ? e.detail.pathInfo.requestPath : "") + " " + (x ? x.status : ""));
			});
		});`)
	t.Cleanup(func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			defer cancel()
			log, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.pelwardenLog || []`))
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("dlq-length") || {}).outerHTML`))
			t.Logf("htmx requests since the dead-letter page loaded:\n%s\n#dlq-length: %s", strings.Join(log, "\n"), html)
		}
	})

	// Nothing selected: the refusal shows in the dialog; Cancel closes a
	// confirmation in place.
	b.run(t, "redrive nothing", chromedp.Click(chromedp.CSS("#redrive-selected")), chromedp.WaitVisible(chromedp.CSS("#dialog .error")), settled())
	require.Contains(t, b.text(t, "#dialog .error"), "select the records to redrive")
	b.run(t, "ask to purge, then cancel", chromedp.Click(chromedp.CSS("#purge")), chromedp.WaitVisible(chromedp.CSS("#confirm-dialog")), settled(),
		chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitNotPresent(chromedp.CSS("#confirm-dialog")))
	require.EqualValues(t, 5, rdb.XLen(context.Background(), sc.DLQ).Val())

	b.run(t, "select two records",
		chromedp.Click(chromedp.CSS(`#selection tbody tr:nth-child(1) input[name="id"]`)),
		chromedp.Click(chromedp.CSS(`#selection tbody tr:nth-child(2) input[name="id"]`)),
	)
	require.Equal(t, "2 selected", b.text(t, "#selected-count"))
	b.run(t, "ask to redrive", chromedp.Click(chromedp.CSS("#redrive-selected")), chromedp.WaitVisible(chromedp.CSS("#confirm-dialog")), settled())
	require.Equal(t, "2 records", b.text(t, "#touch-count"))
	require.EqualValues(t, 5, rdb.XLen(context.Background(), sc.DLQ).Val(), "the confirmation changed nothing")

	b.run(t, "confirm and wait for the outcome", chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(`#job[data-done="true"] #job-outcome`)))
	require.Contains(t, b.text(t, "#job-outcome"), "moved 2 records")
	b.run(t, "the count goes down in place", chromedp.WaitVisible(chromedp.CSS(`#dlq-length .count[data-length="3"]`)))
	require.Equal(t, "3 records", b.text(t, "#dlq-length .count"))
	require.Equal(t, 42, eval[int](t, b, `window.pelwardenMarker`), "the page was not reloaded")
	require.EqualValues(t, 3, rdb.XLen(context.Background(), sc.DLQ).Val())
	require.EqualValues(t, 32, rdb.XLen(context.Background(), sc.Stream).Val(), "the two records are back in their stream")

	// Dark mode follows the system.
	light := eval[string](t, b, `getComputedStyle(document.body).backgroundColor`)
	_, err = chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
	require.NoError(t, err)
	require.Equal(t, "rgb(20, 24, 29)", eval[string](t, b, `getComputedStyle(document.body).backgroundColor`))
	require.Equal(t, "rgb(255, 255, 255)", light)
	b.noProblems(t)
}
