// Package httpserve serves an http.Handler until a context ends, then shuts
// it down gracefully: the one way the dashboard and the exporter stop.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout bounds the graceful shutdown of Serve.
const ShutdownTimeout = 5 * time.Second

// Serve serves h on ln (closing it at the end) until ctx is done; then it
// stops accepting, lets requests in flight finish within ShutdownTimeout
// (closing the rest) and returns nil. It returns early with the server's
// error if serving fails.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
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
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
