package pelwardentest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/pelwarden/pelwarden/internal/testserver"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// TestMain points the package's tests at the images pelwarden's own test
// matrix uses (PELWARDEN_IMAGES, else the images scripts/images.sh
// builds), unless PELWARDEN_TEST_IMAGE / PELWARDEN_TEST_VALKEY_IMAGE are
// set, and removes the shared servers at the end.
func TestMain(m *testing.M) {
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
	pelwardentest.Main(m)
}

func setDefault(name, value string) {
	if os.Getenv(name) == "" {
		_ = os.Setenv(name, value)
	}
}
