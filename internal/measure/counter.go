package measure

import (
	"context"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// RoundTripCounter is a go-redis hook counting what the client sends: one
// round trip per Process call and one per pipeline (or transaction) exec,
// and the commands by name. It is safe for concurrent use.
type RoundTripCounter struct {
	mu   sync.Mutex
	sent SentCounts
}

var _ redis.Hook = (*RoundTripCounter)(nil)

// NewRoundTripCounter returns a counter at zero; add it with AddHook.
func NewRoundTripCounter() *RoundTripCounter {
	return &RoundTripCounter{sent: SentCounts{ByName: map[string]int64{}}}
}

// DialHook implements redis.Hook; dials are not counted.
func (c *RoundTripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *RoundTripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.sent.RoundTrips++
		c.sent.Commands++
		c.sent.ByName[cmd.Name()]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *RoundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		c.sent.RoundTrips++
		c.sent.Commands += int64(len(cmds))
		for _, cmd := range cmds {
			c.sent.ByName[cmd.Name()]++
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// SentCounts is what a RoundTripCounter saw.
type SentCounts struct {
	// RoundTrips: single commands plus pipeline execs.
	RoundTrips int64
	// Commands: every command, pipelined ones included.
	Commands int64
	// ByName counts commands by lower-case name ("xack", "fcall").
	ByName map[string]int64
}

// Reset sets the counts back to zero.
func (c *RoundTripCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = SentCounts{ByName: map[string]int64{}}
}

// Snapshot returns a copy of the counts.
func (c *RoundTripCounter) Snapshot() SentCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	s.ByName = make(map[string]int64, len(c.sent.ByName))
	for k, v := range c.sent.ByName {
		s.ByName[k] = v
	}
	return s
}

// CloneOptions returns a copy of o that a benchmark may change.
func CloneOptions(o *redis.Options) *redis.Options {
	c := *o
	return &c
}

// UpstreamDialer returns how the proxy reaches the server: through the
// caller's Dialer when there is one, else a plain dial of Options.Addr.
func UpstreamDialer(o *redis.Options) func(ctx context.Context) (net.Conn, error) {
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
