// Package benchtest gives the benchmark suites' smoke tests their server:
// pelwardentest's shared one. Only _test.go files import it, so the
// pelwarden binary links no container client.
package benchtest

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// Server is the shared test server (PELWARDEN_TEST_IMAGE, set by the
// Makefile): its client's options, the client and the image. Without
// Docker the test is skipped, unless PELWARDEN_REQUIRE_DOCKER is set (make
// test sets it). Call pelwardentest.Main from TestMain to remove it.
func Server(t *testing.T) (*redis.Options, *redis.Client, string) {
	t.Helper()
	var opts []pelwardentest.Option
	if os.Getenv(testserver.EnvRequireDocker) == "" {
		opts = append(opts, pelwardentest.SkipIfUnavailable())
	}
	s := pelwardentest.Start(t, opts...)
	rdb, ok := s.Client().(*redis.Client)
	if !ok {
		t.Fatalf("benchtest: want a standalone server, got %T", s.Client())
	}
	return rdb.Options(), rdb, s.Image()
}
