package measure

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyProxy is a TCP proxy that adds a fixed delay to each direction of
// every connection: each chunk of bytes read from one side is written to the
// other no earlier than delay after it was read, in order. A round trip
// through it therefore takes at least 2*delay more than a direct one.
//
// Per connection and direction, a reader goroutine stamps the chunks it reads
// and a writer goroutine writes each chunk when its time has come. On Linux
// the writer sleeps with nanosleep on its own thread (timer slack 1 ns):
// the Go runtime's timers wake sub-millisecond sleeps only after about a
// millisecond, which would double the configured latency.
type LatencyProxy struct {
	ln    net.Listener
	dial  func(ctx context.Context) (net.Conn, error)
	delay atomic.Int64 // nanoseconds, each direction

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// proxyChunk is a piece of the byte stream and the time it may be written.
type proxyChunk struct {
	due  time.Time
	data []byte
}

// NewLatencyProxy listens on 127.0.0.1 on a free port and forwards every
// connection to what dial returns, delayed by delay in each direction.
func NewLatencyProxy(dial func(ctx context.Context) (net.Conn, error), delay time.Duration) (*LatencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &LatencyProxy{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	p.SetDelay(delay)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *LatencyProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the delay of each direction for the chunks read from now
// on.
func (p *LatencyProxy) SetDelay(d time.Duration) { p.delay.Store(int64(max(d, 0))) }

// Delay is the current delay of each direction.
func (p *LatencyProxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Close stops accepting, closes every proxied connection and waits until all
// the proxy's goroutines have ended.
func (p *LatencyProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers conns so Close can close them; false once closed.
func (p *LatencyProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *LatencyProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

func (p *LatencyProxy) serve(client net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := p.dial(ctx)
	cancel()
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, up) {
		_ = client.Close()
		_ = up.Close()
		return
	}
	defer p.untrack(client, up)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pipe(up, client)
	}()
	go func() {
		defer wg.Done()
		p.pipe(client, up)
	}()
	wg.Wait()
	_ = client.Close()
	_ = up.Close()
}

// pipe copies src to dst with the delay. At EOF it forwards the half-close;
// on an error it closes both ends, which ends the other direction too.
func (p *LatencyProxy) pipe(dst, src net.Conn) {
	ch := make(chan proxyChunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer lockForPreciseSleep()()
		failed := false
		for c := range ch {
			if failed {
				continue // drain, so the reader never blocks
			}
			if d := time.Until(c.due); d > 0 {
				preciseSleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				failed = true
				_ = src.Close()
				_ = dst.Close()
			}
		}
		if !failed {
			closeWrite(dst)
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			data := make([]byte, n)
			copy(data, buf[:n])
			ch <- proxyChunk{due: time.Now().Add(p.Delay()), data: data}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				_ = dst.Close()
			}
			break
		}
	}
	close(ch)
	<-done
}

// closeWrite half-closes c when it supports it, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
