package measure

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// echoServer accepts connections and writes back what it reads until EOF,
// then closes. It returns its address and a function stopping it.
func echoServer(t *testing.T) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), func() {
		_ = ln.Close()
		wg.Wait()
	}
}

func dialTo(addr string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// Bytes pass through the proxy exactly and in order, in both directions,
// with the half-close forwarded; Close ends every goroutine.
func TestLatencyProxyPassesBytesInOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	addr, stopEcho := echoServer(t)
	defer stopEcho()
	p, err := NewLatencyProxy(dialTo(addr), 200*time.Microsecond)
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))

	sent := make([]byte, 4<<20)
	_, err = rand.Read(sent)
	require.NoError(t, err)
	var got []byte
	readDone := make(chan error, 1)
	go func() {
		var err error
		got, err = io.ReadAll(c)
		readDone <- err
	}()
	// Writes of varying sizes, so chunks of many sizes queue in the proxy.
	for off, step := 0, 1; off < len(sent); step = step*7%65521 + 1 {
		end := min(off+step, len(sent))
		_, err := c.Write(sent[off:end])
		require.NoError(t, err)
		off = end
	}
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	require.NoError(t, <-readDone, "the echo's EOF comes back through the proxy")
	require.Equal(t, len(sent), len(got))
	require.True(t, bytes.Equal(sent, got), "bytes differ or are out of order")

	// A second connection works while the first is still open.
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	_, err = c2.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	require.NoError(t, c2.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadFull(c2, buf)
	require.NoError(t, err)
	require.Equal(t, "ping", string(buf))

	require.NoError(t, p.Close())
	// The proxy closed c2's upstream side: c2 sees EOF or a reset.
	_, err = c2.Read(buf)
	require.Error(t, err)
}

// A round trip through the proxy takes at least twice the one-way delay.
// Only the lower bound is asserted: an upper bound would flake on a busy
// machine. The median is logged.
func TestLatencyProxyAddsDelay(t *testing.T) {
	defer goleak.VerifyNone(t)
	addr, stopEcho := echoServer(t)
	defer stopEcho()
	const delay = 2 * time.Millisecond
	p, err := NewLatencyProxy(dialTo(addr), delay)
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))

	var rtts []time.Duration
	buf := make([]byte, 1)
	for i := 0; i < 20; i++ {
		start := time.Now()
		_, err := c.Write([]byte{byte(i)})
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
		rtts = append(rtts, time.Since(start))
		require.Equal(t, byte(i), buf[0])
	}
	for i, rtt := range rtts {
		require.GreaterOrEqual(t, rtt, 2*delay, "round trip %d", i)
	}
	t.Logf("one-way delay %v: round trips %v", delay, rtts)
}
