package reclaim

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/textbook"
)

const (
	benchGroup   = "bench"
	deadConsumer = "dead"
	rescuer      = "rescuer"
	buildBatch   = 1000
	readBatch    = 10000
)

// scenario is one method's copy of the PEL left by a dead consumer.
type scenario struct {
	stream, dlq, group string
	// ids of every entry, in stream order, and its role.
	ids     []string
	poison  []string // at max deliveries, still in the stream
	deleted []string // XDELed while pending
	live    []string // the others
}

// build creates the stream and group, adds n entries, delivers them all to
// the dead consumer, raises the poison entries' delivery count to
// MaxDeliveries and deletes some entries from the stream.
func (s *scenario) build(ctx context.Context, rdb *redis.Client, cfg Config, n int) error {
	if err := rdb.Del(ctx, s.stream, s.dlq).Err(); err != nil {
		return fmt.Errorf("DEL: %w", err)
	}
	if err := rdb.XGroupCreateMkStream(ctx, s.stream, s.group, "$").Err(); err != nil {
		return fmt.Errorf("XGROUP CREATE: %w", err)
	}
	payload := strings.Repeat("x", cfg.PayloadBytes)
	s.ids = make([]string, 0, n)
	for start := 0; start < n; start += buildBatch {
		p := rdb.Pipeline()
		var cmds []*redis.StringCmd
		for i := start; i < n && i < start+buildBatch; i++ {
			cmds = append(cmds, p.XAdd(ctx, &redis.XAddArgs{Stream: s.stream,
				Values: []string{"n", fmt.Sprint(i), "payload", payload}}))
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("XADD: %w", err)
		}
		for _, c := range cmds {
			s.ids = append(s.ids, c.Val())
		}
	}
	for read := 0; read < n; {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.group, Consumer: deadConsumer,
			Streams: []string{s.stream, ">"}, Count: readBatch, Block: -1}).Result()
		if err != nil {
			return fmt.Errorf("XREADGROUP after %d entries: %w", read, err)
		}
		read += len(res[0].Messages)
	}

	s.poison, s.deleted, s.live = nil, nil, nil
	for i, id := range s.ids {
		switch {
		case cfg.PoisonEvery > 0 && i%cfg.PoisonEvery == 0:
			s.poison = append(s.poison, id)
		case cfg.DeletedEvery > 0 && i%cfg.DeletedEvery == cfg.DeletedEvery/2:
			s.deleted = append(s.deleted, id)
		default:
			s.live = append(s.live, id)
		}
	}
	// XCLAIM ... RETRYCOUNT sets the delivery count (instead of bumping it);
	// claiming to the same consumer keeps the dead consumer the owner.
	for _, batch := range chunks(s.poison, buildBatch) {
		args := []any{"XCLAIM", s.stream, s.group, deadConsumer, 0}
		for _, id := range batch {
			args = append(args, id)
		}
		args = append(args, "RETRYCOUNT", cfg.MaxDeliveries, "JUSTID")
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("XCLAIM RETRYCOUNT: %w", err)
		}
	}
	for _, batch := range chunks(s.deleted, buildBatch) {
		if err := rdb.XDel(ctx, s.stream, batch...).Err(); err != nil {
			return fmt.Errorf("XDEL: %w", err)
		}
	}

	// Check the scenario before measuring anything on it.
	sum, err := rdb.XPending(ctx, s.stream, s.group).Result()
	if err != nil {
		return fmt.Errorf("XPENDING: %w", err)
	}
	if sum.Count != int64(n) {
		return fmt.Errorf("scenario: %d entries pending, want %d", sum.Count, n)
	}
	for _, c := range []struct {
		ids  []string
		want int64
	}{{s.poison, int64(cfg.MaxDeliveries)}, {s.live, 1}} {
		if len(c.ids) == 0 {
			continue
		}
		for _, id := range []string{c.ids[0], c.ids[len(c.ids)-1]} {
			p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: s.group, Start: id, End: id, Count: 1}).Result()
			if err != nil {
				return fmt.Errorf("XPENDING %s: %w", id, err)
			}
			if len(p) != 1 || p[0].RetryCount != c.want || p[0].Consumer != deadConsumer {
				return fmt.Errorf("scenario: pending entry of %s is %+v, want %d deliveries to %q", id, p, c.want, deadConsumer)
			}
		}
	}
	return nil
}

// cleanup deletes the scenario's keys.
func (s *scenario) cleanup(ctx context.Context, rdb *redis.Client) {
	_ = rdb.Del(ctx, s.stream, s.dlq).Err()
}

// verify checks the end state after a method reclaimed the scenario: the PEL
// is empty; every live entry (and, for methods without a delivery limit,
// every poison entry) was handled exactly once; the dead-letter stream holds
// exactly the poison entries for the methods that dead-letter, and does not
// exist for the others.
func (s *scenario) verify(ctx context.Context, rdb *redis.Client, m Method, out outcome) error {
	sum, err := rdb.XPending(ctx, s.stream, s.group).Result()
	if err != nil {
		return fmt.Errorf("verify: XPENDING: %w", err)
	}
	if sum.Count != 0 {
		return fmt.Errorf("verify: %d entries still pending", sum.Count)
	}

	wantHandled := append([]string(nil), s.live...)
	var wantDead []string
	if m.deadLetters() {
		wantDead = s.poison
	} else {
		wantHandled = append(wantHandled, s.poison...)
	}
	if err := sameSet("handled", out.handled, wantHandled); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if err := sameSet("dead-lettered (reported)", out.dead, wantDead); err != nil {
		return fmt.Errorf("verify: %w", err)
	}

	recs, err := rdb.XRange(ctx, s.dlq, "-", "+").Result()
	if err != nil {
		return fmt.Errorf("verify: XRANGE dead-letter stream: %w", err)
	}
	field := pelwarden.FieldOriginalID
	if m == MethodTextbook {
		field = textbook.OriginalIDField
	}
	stored := make([]string, 0, len(recs))
	for _, r := range recs {
		id, _ := r.Values[field].(string)
		stored = append(stored, id)
	}
	if err := sameSet("dead-letter stream", stored, wantDead); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return nil
}

// sameSet reports how got differs from want as sets without duplicates.
func sameSet(what string, got, want []string) error {
	seen := make(map[string]int, len(got))
	for _, id := range got {
		seen[id]++
	}
	var dup, missing []string
	for id, n := range seen {
		if n > 1 {
			dup = append(dup, id)
		}
	}
	for _, id := range want {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
		delete(seen, id)
	}
	var extra []string
	for id := range seen {
		extra = append(extra, id)
	}
	if len(dup)+len(missing)+len(extra) == 0 {
		return nil
	}
	sort.Strings(dup)
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Errorf("%s: %d ids, want %d: %d duplicated %v, %d missing %v, %d unexpected %v",
		what, len(got), len(want), len(dup), clip(dup), len(missing), clip(missing), len(extra), clip(extra))
}

func clip(ids []string) []string {
	if len(ids) > 5 {
		return ids[:5]
	}
	return ids
}

func chunks(ids []string, n int) [][]string {
	var out [][]string
	for len(ids) > n {
		out = append(out, ids[:n])
		ids = ids[n:]
	}
	if len(ids) > 0 {
		out = append(out, ids)
	}
	return out
}
