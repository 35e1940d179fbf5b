package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// chaosProducer writes entries seq=0..n-1 at a steady rate through the
// proxy. An entry counts as produced only when XADD returned its id. A
// failed XADD is sent again (same seq) until one succeeds: the failed one
// may have been applied anyway (the reply was lost), which leaves a second
// entry with the same seq in the stream; the checker counts those as "maybe
// produced" and holds them to the same rules.
type chaosProducer struct {
	rdb  *redis.Client
	keys chaosKeys
	n    int
	rate int // entries per second

	mu       sync.Mutex
	acked    []string // ids XADD returned
	errors   int      // failed XADD attempts
	finished bool
}

// chaosPayload pads entries so replies span several TCP segments (the
// slicer and limit_data toxics then cut inside them).
const chaosPayload = "order-payload-0123456789abcdefghijklmnopqrstuvwxyz-0123456789abcdefghijklmnopqrstuvwxyz"

// run produces until every seq is acknowledged or ctx is done.
func (p *chaosProducer) run(ctx context.Context) error {
	const tick = 10 * time.Millisecond
	const maxBatch = 200
	start := time.Now()
	next := 0       // next new seq
	var retry []int // seqs whose XADD failed
	t := time.NewTicker(tick)
	defer t.Stop()
	for next < p.n || len(retry) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("producer: %d of %d entries acknowledged when stopped: %w", p.produced(), p.n, ctx.Err())
		case <-t.C:
		}
		due := min(p.n, int(time.Since(start).Seconds()*float64(p.rate))+1)
		batch := retry
		retry = nil
		for next < due && len(batch) < maxBatch {
			batch = append(batch, next)
			next++
		}
		if len(batch) == 0 {
			continue
		}
		pipe := p.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(batch))
		for i, seq := range batch {
			cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.keys.Stream, Values: []string{
				"seq", strconv.Itoa(seq), "payload", chaosPayload}})
		}
		_, _ = pipe.Exec(ctx)
		p.mu.Lock()
		for i, c := range cmds {
			if id, err := c.Result(); err == nil {
				p.acked = append(p.acked, id)
			} else {
				p.errors++
				retry = append(retry, batch[i])
			}
		}
		p.mu.Unlock()
		if len(retry) > 0 {
			// The server or the proxy is down or cut: don't spin.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	p.mu.Lock()
	p.finished = true
	p.mu.Unlock()
	return nil
}

func (p *chaosProducer) produced() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

func (p *chaosProducer) done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finished
}

// result returns the acknowledged ids and the failed attempts.
func (p *chaosProducer) result() ([]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.acked...), p.errors
}
