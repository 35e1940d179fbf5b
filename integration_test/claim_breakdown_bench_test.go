package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/measure"
)

// breakdownLibrary is a function library of the claim function's steps
// alone, to see where its server time goes (issue 25 §1): each returns what
// the next page needs and the reply a client would get.
const breakdownLibrary = `#!lua name=pwbreakdown
-- XAUTOCLAIM from Lua, its reply returned unchanged: what running the
-- floor's command inside a function costs (the reply converted to Lua and
-- back).
redis.register_function('pwbd_autoclaim', function(keys, args)
  return redis.call('XAUTOCLAIM', keys[1], args[1], args[2], 0, args[3], 'COUNT', args[4])
end)
-- One XPENDING page in its extended form (id, owner, idle, deliveries per
-- entry): what reading the delivery counts costs. Returns the last id.
redis.register_function('pwbd_pending', function(keys, args)
  local page = redis.call('XPENDING', keys[1], args[1], '(' .. args[3], '+', tonumber(args[4]))
  if #page == 0 then return '0-0' end
  return page[#page][1]
end)
-- XPENDING, then one XCLAIM of the page's ids, its reply returned: the
-- claim function's reads without its checks, dead-lettering or reply
-- building.
redis.register_function('pwbd_pending_claim', function(keys, args)
  local page = redis.call('XPENDING', keys[1], args[1], '(' .. args[3], '+', tonumber(args[4]))
  if #page == 0 then return {'0-0', {}} end
  local ids = {}
  for i, p in ipairs(page) do ids[i] = p[1] end
  local got = redis.call('XCLAIM', keys[1], args[1], args[2], 0, unpack(ids))
  return {page[#page][1], got}
end)
`

// BenchmarkClaimBreakdown measures the server CPU per reclaimed entry
// (INFO cpu user+sys deltas) of the floor (XAUTOCLAIM COUNT 500 from the
// client, the previous page's XACK pipelined with it), of the claim
// function, and of the claim function's steps as functions of their own:
// XAUTOCLAIM run from Lua, one XPENDING page, XPENDING plus one XCLAIM.
// Each method drains its own copy of a 100,000-entry PEL of a dead consumer
// (fields n and a 64-byte payload, nothing poison or deleted), on the first
// server of the matrix; each reports µs/entry and its ratio to the floor's.
//
//	PELWARDEN_IMAGES=pelwarden/redis:7.0 go test -run '^$' -bench ClaimBreakdown -benchtime 1x ./integration_test/
func BenchmarkClaimBreakdown(b *testing.B) {
	s := servers[0]
	ctx := context.Background()
	if err := s.rdb.FunctionLoadReplace(ctx, breakdownLibrary).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.rdb.FunctionDelete(context.Background(), "pwbreakdown") })
	const n, page = 100_000, 500
	type method struct {
		name string
		// step reclaims one page from cursor as consumer "rescuer" and
		// returns the next cursor ("0-0": done) and the ids to ack (nil:
		// nothing was claimed).
		step func(stream, cursor string) (string, []string, error)
	}
	idsOf := func(msgs []redis.XMessage) []string {
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		return ids
	}
	methods := []method{
		{"floor: XAUTOCLAIM", func(stream, cursor string) (string, []string, error) {
			msgs, next, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: "g", Consumer: "rescuer", Start: cursor, Count: page}).Result()
			return next, idsOf(msgs), err
		}},
		{"XAUTOCLAIM in a function", func(stream, cursor string) (string, []string, error) {
			return cursorAndIDs(s.rdb.FCall(ctx, "pwbd_autoclaim", []string{stream}, "g", "rescuer", cursor, page).Slice())
		}},
		{"XPENDING page in a function", func(stream, cursor string) (string, []string, error) {
			last, err := s.rdb.FCall(ctx, "pwbd_pending", []string{stream}, "g", "rescuer", cursor, page).Text()
			return last, nil, err
		}},
		{"XPENDING + XCLAIM in a function", func(stream, cursor string) (string, []string, error) {
			return cursorAndIDs(s.rdb.FCall(ctx, "pwbd_pending_claim", []string{stream}, "g", "rescuer", cursor, page).Slice())
		}},
		{"pelwarden_v1_claim", func(stream, cursor string) (string, []string, error) {
			p, err := s.lib.Claim(ctx, pelwarden.ClaimArgs{Stream: stream, DeadLetterStream: pelwarden.DeadLetterStreamFor(stream), Group: "g",
				Consumer: "rescuer", Cursor: cursor, Count: page, MaxDeliveries: 5})
			if err != nil {
				return "", nil, err
			}
			ids := make([]string, len(p.Entries))
			for i, e := range p.Entries {
				ids[i] = e.ID
			}
			return p.Cursor, ids, nil
		}},
	}
	results := map[string]float64{}
	for range b.N {
		for _, m := range methods {
			stream := "{bench-breakdown-" + strings.ReplaceAll(m.name, " ", "-") + "}"
			if err := buildDeadPEL(ctx, s.rdb, stream, n); err != nil {
				b.Fatal(err)
			}
			before, err := measure.ServerCPU(ctx, s.rdb)
			if err != nil {
				b.Fatal(err)
			}
			cursor, pages := "0-0", 0
			var toAck []string
			for {
				var ack *redis.IntCmd
				if len(toAck) > 0 {
					ack = s.rdb.XAck(ctx, stream, "g", toAck...)
				}
				next, ids, err := m.step(stream, cursor)
				if err != nil {
					b.Fatalf("%s: %v", m.name, err)
				}
				if ack != nil && ack.Err() != nil {
					b.Fatal(ack.Err())
				}
				toAck, cursor = ids, next
				pages++
				if cursor == "0-0" {
					break
				}
			}
			if len(toAck) > 0 {
				if err := s.rdb.XAck(ctx, stream, "g", toAck...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			after, err := measure.ServerCPU(ctx, s.rdb)
			if err != nil {
				b.Fatal(err)
			}
			us := float64((after - before).Microseconds()) / n
			results[m.name] += us
			s.rdb.Del(ctx, stream, pelwarden.DeadLetterStreamFor(stream))
			b.Logf("%-32s %6.2f µs of server CPU per entry, %d calls", m.name, us, pages)
		}
	}
	floor := results[methods[0].name]
	for _, m := range methods {
		b.ReportMetric(results[m.name]/float64(b.N), strings.ReplaceAll(m.name, " ", "_")+"-µs/entry")
		b.Logf("%-32s %.2fx the floor's server CPU per entry", m.name, results[m.name]/floor)
	}
}

// cursorAndIDs reads a {cursor, {{id, fields}, ...}} reply: the next
// cursor and the ids of the entries.
func cursorAndIDs(v []any, err error) (string, []string, error) {
	if err != nil {
		return "", nil, err
	}
	msgs, _ := v[1].([]any)
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = fmt.Sprint(m.([]any)[0])
	}
	return fmt.Sprint(v[0]), ids, nil
}

// buildDeadPEL makes stream hold n entries (fields n and a 64-byte
// payload), all delivered to consumer "dead" of group "g" and idle.
func buildDeadPEL(ctx context.Context, rdb *redis.Client, stream string, n int) error {
	rdb.Del(ctx, stream, pelwarden.DeadLetterStreamFor(stream))
	if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		return err
	}
	payload := strings.Repeat("x", 64)
	for i := 0; i < n; i += 1000 {
		p := rdb.Pipeline()
		for j := i; j < i+1000 && j < n; j++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"n", fmt.Sprint(j), "payload", payload}})
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	for read := 0; read < n; {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{stream, ">"}, Count: 10000}).Result()
		if err != nil {
			return err
		}
		read += len(res[0].Messages)
	}
	time.Sleep(5 * time.Millisecond) // idle for more than min-idle 0
	return nil
}
