package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// chaosProxy is a toxiproxy proxy (the library, in the test process) on
// 127.0.0.1 in front of a chaos scenario's server. Producers and consumer
// subprocesses dial it; the harness's admin client dials the server itself.
// Its address stays the same for the whole scenario, also across server
// restarts (which change the container's mapped port).
//
// Toxics are never added to or removed from a proxy that has connections:
// in toxiproxy v2.5.0 that can deadlock (RemoveToxic holds the collection's
// lock while it interrupts a link's toxic stub, and a stub blocked sending
// to a link writer that has just exited never answers; the writer waits for
// that same lock to unregister). Changing the toxics instead stops the
// proxy, which closes every connection (the clients see a cut), and starts
// a new one on the same port with the new toxics already in place.
type chaosProxy struct {
	srv *testserver.Server
	api *toxiproxy.ApiServer

	mu        sync.Mutex
	listen    string           // host:port, fixed after the first start
	cur       *toxiproxy.Proxy // nil while suspended or closed
	toxics    []toxic
	suspended bool
	closed    bool
}

// newChaosProxy starts a proxy to srv on a free port of 127.0.0.1.
func newChaosProxy(ctx context.Context, srv *testserver.Server) (*chaosProxy, error) {
	p := &chaosProxy{
		srv:    srv,
		api:    toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		listen: proxyListenAddr(),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.startLocked(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Addr is the address clients dial (host:port).
func (p *chaosProxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listen
}

// toxic is one toxiproxy toxic: type (latency, timeout, reset_peer, slicer,
// limit_data), direction ("upstream": client to server, "downstream": server
// to client), the share of connections it affects, and its attributes.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

func (t toxic) String() string {
	return fmt.Sprintf("%s/%s toxicity=%.2f %v", t.Type, t.Stream, t.Toxicity, t.Attributes)
}

// startLocked starts a new proxy to the server's current address with the
// current toxics. p.mu is held. Once the old proxy is stopped a new one
// must start, or every client is cut off for the rest of the scenario: the
// end of the faults cancels ctx, and a change it cut short between the stop
// and the start once left the proxy down (a drain failure: entries idle for
// minutes that no consumer, none of them able to connect, reclaimed). So
// ctx's cancellation is ignored here; a minute bounds the start instead.
func (p *chaosProxy) startLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	upstream, err := p.srv.Addr(ctx)
	if err != nil {
		return err
	}
	np := toxiproxy.NewProxy(p.api, "redis", p.listen, upstream)
	for _, t := range p.toxics {
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		// No connection exists yet: adding cannot block.
		if _, err := np.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			return fmt.Errorf("chaos proxy: toxic %s: %w", t, err)
		}
	}
	// The previous proxy's port was just released; binding it again can
	// take a moment under load.
	for attempt := 0; ; attempt++ {
		err = np.Start()
		if err == nil {
			break
		}
		if attempt == 50 {
			return fmt.Errorf("chaos proxy: listen on %s: %w", p.listen, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	np.Lock()
	p.listen = np.Listen
	np.Unlock()
	p.cur = np
	return nil
}

// stopLocked stops the current proxy, closing its connections. p.mu is held.
func (p *chaosProxy) stopLocked() {
	if p.cur != nil {
		p.cur.Stop()
		p.cur = nil
	}
}

// setToxics replaces the toxics (nil: none). Every connection is cut.
func (p *chaosProxy) setToxics(ctx context.Context, ts []toxic) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toxics = ts
	if p.closed || p.suspended {
		return nil // applied by resume
	}
	p.stopLocked()
	return p.startLocked(ctx)
}

// suspend closes every proxied connection and refuses new ones: no client
// reaches the server until resume.
func (p *chaosProxy) suspend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suspended = true
	p.stopLocked()
}

// resume accepts connections again, on the same port, to the server's
// current address.
func (p *chaosProxy) resume(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.suspended = false
	if p.closed {
		return nil
	}
	return p.startLocked(ctx)
}

// close stops the proxy for good.
func (p *chaosProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.stopLocked()
}

// proxyListenAddr picks a free port below the ephemeral range: the proxy
// releases and binds its port again at every change, and an ephemeral port
// could meanwhile become the local port of some outgoing connection.
// "127.0.0.1:0" when the range is unknown or leaves no room below it.
func proxyListenAddr() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return "127.0.0.1:0"
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "127.0.0.1:0"
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 12000 {
		return "127.0.0.1:0"
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.N(low-10000)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			_ = ln.Close()
			return addr
		}
	}
	return "127.0.0.1:0"
}

// A change of toxics completes even when its context is already
// cancelled: the end of the faults cancels the injector's context, and a
// change cut short between stopping the old proxy and starting the new one
// left every client cut off for the rest of the scenario.
func TestChaosProxyChangeOutlivesItsContext(t *testing.T) {
	t.Parallel()
	s := servers[0]
	p, err := newChaosProxy(t.Context(), s.srv)
	require.NoError(t, err)
	t.Cleanup(p.close)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Ping(t.Context()).Err())

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, p.setToxics(cancelled, []toxic{{Name: "slow", Type: "latency", Stream: "downstream", Toxicity: 1,
		Attributes: map[string]any{"latency": 1}}}))
	require.NoError(t, rdb.Ping(t.Context()).Err(), "the proxy runs with the new toxics")
	require.NoError(t, p.setToxics(cancelled, nil))
	require.NoError(t, rdb.Ping(t.Context()).Err(), "the proxy runs without toxics")
}
