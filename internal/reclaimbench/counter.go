package reclaimbench

import (
	"context"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// roundTripCounter is a go-redis hook counting what the client sends: one
// round trip per Process call and one per pipeline (or transaction) exec,
// and the commands by name.
type roundTripCounter struct {
	mu         sync.Mutex
	roundTrips int64
	commands   int64
	byName     map[string]int64
}

var _ redis.Hook = (*roundTripCounter)(nil)

func newRoundTripCounter() *roundTripCounter {
	return &roundTripCounter{byName: map[string]int64{}}
}

// DialHook implements redis.Hook; dials are not counted.
func (c *roundTripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *roundTripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.roundTrips++
		c.commands++
		c.byName[cmd.Name()]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *roundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.roundTrips++
		c.commands += int64(len(cmds))
		for _, cmd := range cmds {
			c.byName[cmd.Name()]++
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

type sentCounts struct {
	roundTrips, commands int64
	byName               map[string]int64
}

func (c *roundTripCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTrips, c.commands = 0, 0
	c.byName = map[string]int64{}
}

func (c *roundTripCounter) snapshot() sentCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := sentCounts{roundTrips: c.roundTrips, commands: c.commands, byName: make(map[string]int64, len(c.byName))}
	for k, v := range c.byName {
		s.byName[k] = v
	}
	return s
}

// cloneOptions returns a copy of o that Run may change.
func cloneOptions(o *redis.Options) *redis.Options {
	c := *o
	return &c
}

// upstreamDialer returns how the proxy reaches the server: through the
// caller's Dialer when there is one, else a plain dial of Options.Addr.
func upstreamDialer(o *redis.Options) func(ctx context.Context) (net.Conn, error) {
	network, addr, dialer := o.Network, o.Addr, o.Dialer
	if network == "" {
		network = "tcp"
	}
	return func(ctx context.Context) (net.Conn, error) {
		if dialer != nil {
			return dialer(ctx, network, addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}
