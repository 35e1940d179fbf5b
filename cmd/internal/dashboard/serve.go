package dashboard

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/cmd/internal/httpserve"
)

// ShutdownTimeout bounds the graceful shutdown of Serve.
const ShutdownTimeout = httpserve.ShutdownTimeout

// Serve serves the dashboard on ln (closing it at the end) and runs its
// refresh loop until ctx is done; then it stops accepting, lets requests
// in flight finish within ShutdownTimeout, cancels running actions and
// waits for them, and returns nil. It returns early with the server's
// error if serving fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = s.Run(runCtx)
	}()
	err := httpserve.Serve(ctx, ln, s)
	stopRun()
	<-ran
	return err
}

// Start serves a new dashboard over rdb on addr in the background, for a
// program that shows it beside its own work (`pelwarden demo --ui ADDR`).
// It returns the address it listens on (useful with port 0) and a stop
// function that shuts it down (as Serve does when its context ends) and
// returns Serve's error. ctx ending stops it too.
func Start(ctx context.Context, rdb redis.UniversalClient, addr string, o Options) (string, func() error, error) {
	s, err := New(rdb, o)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx, ln) }()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	return ln.Addr().String(), stop, nil
}
