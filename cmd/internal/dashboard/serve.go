package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ShutdownTimeout bounds the graceful shutdown of Serve.
const ShutdownTimeout = 5 * time.Second

// Serve serves the dashboard on ln (closing it at the end) and runs its
// refresh loop until ctx is done; then it stops accepting, lets requests
// in flight finish within ShutdownTimeout, cancels running actions and
// waits for them, and returns nil. It returns early with the server's
// error if serving fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = s.Run(runCtx)
	}()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		if serr := hs.Shutdown(sctx); serr != nil {
			_ = hs.Close()
		}
		cancel()
		err = <-served
	}
	stopRun()
	<-ran
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
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
