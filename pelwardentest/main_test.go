package pelwardentest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// TestMain points the package's tests at the images pelwarden's own test
// matrix uses (PELWARDEN_IMAGES, else the images scripts/images.sh
// builds), unless PELWARDEN_TEST_IMAGE / PELWARDEN_TEST_VALKEY_IMAGE are
// set, removes the shared servers at the end and checks for leaked
// goroutines.
func TestMain(m *testing.M) {
	if os.Getenv(pelwardentest.EnvRedisURL) == "" && testserver.SkipWithoutDocker(context.Background(), "pelwardentest") {
		os.Exit(0)
	}
	images := testserver.Images()
	redisImage, valkeyImage := "pelwarden/redis:8.0", "pelwarden/valkey:8.1"
	if os.Getenv("PELWARDEN_IMAGES") != "" && len(images) > 0 {
		redisImage = images[0]
	}
	for _, img := range images {
		if strings.Contains(img, "valkey") {
			valkeyImage = img
			break
		}
	}
	setDefault(pelwardentest.EnvImage, redisImage)
	setDefault(pelwardentest.EnvValkeyImage, valkeyImage)
	code := m.Run()
	if err := pelwardentest.CloseShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(
			// The Docker client's idle HTTP connections.
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func setDefault(name, value string) {
	if os.Getenv(name) == "" {
		_ = os.Setenv(name, value)
	}
}
