package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/cmd/internal/dashboard"
)

// exampleAddr is the address of a Redis server (here the tests' own).
var exampleAddr = dashboard.AddrForExamples

// A dashboard is an http.Handler: mount it under its base path, and run its
// refresh loop beside it.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr()}) // or a cluster client
	defer rdb.Close()
	s, err := dashboard.New(rdb, dashboard.Options{
		BasePath: "/pelwarden",
		ReadOnly: true,
		Streams:  "{example}*",
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()

	mux := http.NewServeMux()
	mux.Handle("/pelwarden/", s)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	res, err := http.Get(ts.URL + "/pelwarden/")
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println(res.Status)

	cancel()
	<-done
	// Output: 200 OK
}

// Start serves a dashboard on an address until stopped: what a program
// such as `pelwarden demo --ui ADDR` calls.
func ExampleStart() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr()}) // or a cluster client
	defer rdb.Close()
	addr, stop, err := dashboard.Start(context.Background(), rdb, "127.0.0.1:0",
		dashboard.Options{Refresh: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	res, err := http.Get("http://" + addr + "/")
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println(res.Status)
	if err := stop(); err != nil {
		panic(err)
	}
	// Output: 200 OK
}
