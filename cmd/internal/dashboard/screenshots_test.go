package dashboard

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// EnvScreenshots names a directory: TestScreenshots writes the dashboard guide's
// screenshots there (make ui-screenshots: docs/screenshots).
const EnvScreenshots = "PELWARDEN_UI_SCREENSHOTS"

// TestScreenshots runs a small shop on a server of its own for a few
// seconds (orders billed, shipped and mailed; a stalled worker; poison
// entries; dead letters; the mailer paused) and photographs the overview,
// a group with its actions (the pause control among them), the paused
// group and the dead letters (and the group page in dark mode).
func TestScreenshots(t *testing.T) {
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		t.Skipf("set %s=DIR to write the dashboard's screenshots to DIR", EnvScreenshots)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := testserver.Start(ctx, testImage(), testserver.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	_, err = pelwarden.Load(ctx, rdb)
	require.NoError(t, err)

	shop := newShop(t, rdb)
	s, ts := newTest(t, rdb, Options{Refresh: 500 * time.Millisecond, History: time.Minute, MinIdle: 3 * time.Second, MaxDeliveries: 3})
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) })
	wg.Go(func() { shop.run(ctx) })
	time.Sleep(12 * time.Second) // the sparklines need samples: 24 refreshes

	u, err := url.Parse(ts.URL)
	require.NoError(t, err)
	b := newBrowser(t, u.Host)
	shot := func(name, path, wait string) {
		b.run(t, name, chromedp.Navigate(ts.URL+path), chromedp.WaitVisible(chromedp.CSS(wait)))
		time.Sleep(300 * time.Millisecond)
		sctx, scancel := context.WithTimeout(b.ctx, time.Minute)
		defer scancel()
		png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
		t.Logf("wrote %s", filepath.Join(dir, name+".png"))
	}
	// The mailer falls behind: an operator paused it (the overview's tag,
	// and the group page's banner and Resume control).
	shop.mailerPaused.Store(true) // the shop's mailer honours the pause, as a driver consumer does
	require.NoError(t, pelwarden.PauseGroup(ctx, rdb, "{emails}", "sender", pelwarden.Pause{By: "dashboard:ops", Reason: "mail provider rate-limits us (INC-4211)"}))
	time.Sleep(time.Second) // the overview's next refresh
	shot("overview", "/", "table.groups")
	shot("group", "/group"+q("stream", "{orders}", "group", "billing"), "table.pel-table")
	shot("group-paused", "/group"+q("stream", "{emails}", "group", "sender"), "p.paused-banner")
	shot("deadletters", "/deadletters"+q("key", "{orders}:dead"), "table.dead")
	_, err = chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
	require.NoError(t, err)
	shot("group-dark", "/group"+q("stream", "{orders}", "group", "billing"), "table.pel-table")
	b.noProblems(t)
	cancel()
	wg.Wait()
}

// shop is the screenshots' workload.
type shop struct {
	t   *testing.T
	rdb *redis.Client
	lib *pelwarden.Library
	n   int
	// mailerPaused: the mailer takes nothing (its group is paused).
	mailerPaused atomic.Bool
}

func newShop(t *testing.T, rdb *redis.Client) *shop {
	ctx := context.Background()
	for _, g := range [][2]string{{"{orders}", "billing"}, {"{orders}", "shipping"}, {"{payments}", "ledger"}, {"{emails}", "sender"}} {
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, g[0], g[1], "$").Err())
	}
	sh := &shop{t: t, rdb: rdb, lib: pelwarden.NewLibrary(rdb)}
	sh.add(ctx, 60)
	// worker-3 takes 25 orders and dies with them; five of them were
	// delivered four times (poison at 3).
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "worker-3", Streams: []string{"{orders}", ">"}, Count: 25, Block: -1}).Result()
	require.NoError(t, err)
	var ids []string
	for _, m := range res[0].Messages[:5] {
		ids = append(ids, m.ID)
	}
	for range 3 {
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "{orders}", Group: "billing", Consumer: "worker-3", Messages: ids}).Err())
	}
	return sh
}

// add adds n orders, payments and emails.
func (sh *shop) add(ctx context.Context, n int) {
	pipe := sh.rdb.Pipeline()
	for range n {
		sh.n++
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "{orders}", Values: []any{"order_id", fmt.Sprintf("ord_%06d", sh.n), "customer", fmt.Sprintf("cus_%04d", sh.n*7%9973),
			"amount", fmt.Sprintf("%d.%02d", 10+sh.n%190, sh.n%100), "currency", []string{"EUR", "USD", "GBP"}[sh.n%3]}})
		if sh.n%2 == 0 {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "{payments}", Values: []any{"payment_id", fmt.Sprintf("pay_%06d", sh.n), "status", "captured"}})
		}
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "{emails}", Values: []any{"to", fmt.Sprintf("customer%d@example.com", sh.n%500), "template", "order-confirmation"}})
	}
	_, _ = pipe.Exec(ctx)
}

// run produces and consumes every 100 ms until ctx is done.
func (sh *shop) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sh.add(ctx, 3+i%5)
		sh.consume(ctx, "{orders}", "billing", "worker-1", 3, i)
		sh.consume(ctx, "{orders}", "billing", "worker-2", 3, i+1)
		sh.consume(ctx, "{orders}", "shipping", "shipper", 10, -1)
		sh.consume(ctx, "{payments}", "ledger", "ledger-1", 10, -1)
		if i%3 != 0 && !sh.mailerPaused.Load() {
			sh.consume(ctx, "{emails}", "sender", "mailer", 4, -1) // falls behind
		}
	}
}

// consume reads up to n entries and acks them, dead-lettering one now and
// then (seed >= 0).
func (sh *shop) consume(ctx context.Context, stream, group, consumer string, n int, seed int) {
	res, err := sh.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res) == 0 {
		return
	}
	var ack []string
	for j, m := range res[0].Messages {
		if seed >= 0 && (seed+j)%17 == 0 {
			reason, msg := pelwarden.ReasonHandler, "card declined: do_not_honor (issuer response 05)"
			if (seed+j)%34 == 0 {
				reason, msg = "invalid_currency", "currency XTS is not supported by the acquirer"
			}
			_, _ = sh.lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: stream, DeadLetterStream: pelwarden.DeadLetterStreamFor(stream),
				Group: group, Consumer: consumer, IDs: []string{m.ID}, Reason: reason, Error: msg})
			continue
		}
		ack = append(ack, m.ID)
	}
	if len(ack) > 0 {
		_ = sh.rdb.XAck(ctx, stream, group, ack...).Err()
	}
}
