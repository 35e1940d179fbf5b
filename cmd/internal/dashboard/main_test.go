package dashboard

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// server is the package's one server, started in TestMain; every test uses
// keys of its own.
var server *testserver.Server

// testImage is the image of the package's server: PELWARDEN_TEST_IMAGE,
// else pelwarden/redis:8.0.
func testImage() string {
	if v := os.Getenv("PELWARDEN_TEST_IMAGE"); v != "" {
		return v
	}
	return "pelwarden/redis:8.0"
}

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if testserver.SkipWithoutDocker(ctx, "cmd/internal/dashboard") {
		cancel()
		os.Exit(0)
	}
	s, err := testserver.Start(ctx, testImage(), testserver.Options{})
	if err != nil {
		cancel()
		fmt.Fprintf(os.Stderr, "cmd/internal/dashboard: start %s: %v (build it with scripts/images.sh)\n", testImage(), err)
		os.Exit(1)
	}
	rdb := s.Client()
	_, err = pelwarden.Load(ctx, rdb)
	_ = rdb.Close()
	cancel()
	if err != nil {
		_ = s.Close()
		fmt.Fprintf(os.Stderr, "cmd/internal/dashboard: load the library: %v\n", err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	if err := s.Close(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
