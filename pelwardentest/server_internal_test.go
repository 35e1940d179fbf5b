package pelwardentest

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// When Docker runs but no server starts from the image (it cannot be
// pulled, say), the error says how to go on without it: an existing
// server through the URL variable, or an image the user has or builds.
// The failure is injected: no Docker needed.
func TestStartErrorSaysHowToGoOn(t *testing.T) {
	t.Parallel()
	pull := errors.New("pull access denied for redis, repository does not exist")
	fail := starters{
		health: func(context.Context) error { return nil },
		single: func(context.Context, string, testserver.Options) (*testserver.Server, error) {
			return nil, pull
		},
		cluster: func(context.Context, string, testserver.ClusterOptions) (*testserver.Cluster, error) {
			return nil, pull
		},
	}
	for _, c := range []struct {
		name    string
		r       resolved
		want    []string
		notWant []string
	}{
		{"default image", resolved{image: DefaultImage, imageEnv: EnvImage},
			[]string{`image "redis:8" (the default)`, EnvRedisURL + "=redis://", "docker pull redis:8", "set " + EnvImage + " to an image you have",
				"apt-get install -y redis-server", "docker build -t local/redis:8 - && export " + EnvImage + "=local/redis:8"},
			[]string{EnvClusterURL, "WithImage"}},
		{"image from the environment", resolved{image: "pelwarden/redis:8.0", imageFrom: EnvImage, imageEnv: EnvImage},
			[]string{`image "pelwarden/redis:8.0" (from ` + EnvImage + ")", EnvRedisURL, "set " + EnvImage},
			nil},
		{"valkey", resolved{image: DefaultValkeyImage, imageEnv: EnvValkeyImage},
			[]string{EnvRedisURL, "set " + EnvValkeyImage, "apt-get install -y valkey-server", "export " + EnvValkeyImage + "=local/valkey:8"},
			nil},
		{"WithImage", resolved{image: "my/redis:7", imageFrom: "WithImage"},
			[]string{"(from WithImage)", EnvRedisURL, "pass WithImage an image you have", "export " + EnvImage + "=local/redis:8"},
			nil},
		{"cluster", resolved{image: DefaultImage, imageEnv: EnvImage, cluster: true},
			[]string{"a Redis Cluster", EnvClusterURL + "=redis://"},
			[]string{EnvRedisURL}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, err := openWith(c.r, fail)
			require.Nil(t, srv)
			require.ErrorIs(t, err, pull, "the cause is kept")
			var se *startError
			require.ErrorAs(t, err, &se)
			msg := err.Error()
			require.Contains(t, msg, pull.Error())
			for _, w := range c.want {
				require.Contains(t, msg, w)
			}
			for _, w := range c.notWant {
				require.NotContains(t, msg, w)
			}
			require.NotContains(t, msg, "scripts/images.sh", "a user has no such script")
		})
	}

	// Docker itself unreachable: the URL variable is named too.
	_, err := openWith(resolved{image: DefaultImage}, starters{health: func(context.Context) error { return errors.New("no socket") }})
	var unavailable *unavailableError
	require.ErrorAs(t, err, &unavailable)
	require.Contains(t, err.Error(), EnvRedisURL)
}

// Keys a test made on an existing server (PELWARDEN_TEST_REDIS_URL) are
// removed when the test ends: every key under the fixture's hash tag, after
// the test's consumer stopped, and nothing else. On a server Start started
// in a container they stay, for inspection.
func TestExistingServerKeysRemovedAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// The server PELWARDEN_TEST_REDIS_URL names, or one started here for
	// the purpose. The variable is read, not set: parallel tests are
	// unmoved.
	u := os.Getenv(EnvRedisURL)
	if u == "" {
		image, _ := envOr(EnvImage, DefaultImage)
		ts, err := testserver.Start(ctx, image, testserver.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, ts.Close()) })
		addr, err := ts.Addr(ctx)
		require.NoError(t, err)
		u = "redis://" + addr + "/0"
	}
	r, _ := resolve(nil)
	r.url = u // what resolve returns with the variable set
	srv, err := openWith(r, starters{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.shutdown()) })
	require.True(t, srv.existing)
	opts, err := redis.ParseURL(u)
	require.NoError(t, err)
	rdb := redis.NewClient(opts) // the test's own look at the server
	t.Cleanup(func() { _ = rdb.Close() })

	var tag string
	var bystanders []string
	t.Cleanup(func() {
		for _, k := range bystanders {
			_ = rdb.Del(context.Background(), k).Err()
		}
	})
	// Glob characters in the test's name, so in the tag: SCAN MATCH must
	// take them literally.
	t.Run("orders [a-z]*?", func(t *testing.T) {
		f := srv.NewFixture(t)
		tag = f.Stream
		require.Contains(t, tag, "[a-z]*?")
		// Keys of others: sharing the tag's text but not as a prefix, or
		// matching the tag's pattern were it not escaped.
		bystanders = []string{
			"other:" + tag,
			strings.TrimSuffix(tag, "}"),
			strings.Replace(tag, "[a-z]*?", "b", 1),
		}
		for _, k := range bystanders {
			require.NoError(t, rdb.Set(ctx, k, "keep", 0).Err())
		}
		ids := f.Produce(4, nil)
		f.LeavePending("crashed", 1)
		_, err := srv.Library().DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream,
			Group: f.Group, Consumer: "crashed", IDs: ids[:1], Error: "bad"})
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, f.Stream+":mine", "x", 0).Err())
		var handled atomic.Int64
		f.RunConsumer(driver.Config{Consumer: "worker", Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
			handled.Add(1)
			return nil
		})})
		f.Eventually("3 entries handled", func() bool { return handled.Load() == 3 })
		require.ElementsMatch(t, []string{f.Stream, f.DeadLetterStream, f.Stream + ":mine"}, tagged(t, rdb, tag))
	})
	require.NotEmpty(t, tag)
	require.Empty(t, tagged(t, rdb, tag), "the test's keys are gone")
	for _, k := range bystanders {
		n, err := rdb.Exists(ctx, k).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%s is not the test's: it stays", k)
	}

	base := Start(t)
	if base.existing {
		return // the run itself uses PELWARDEN_TEST_REDIS_URL
	}
	var kept string
	t.Run("container", func(t *testing.T) {
		f := base.NewFixture(t)
		kept = f.Stream
		f.Produce(1, nil)
	})
	require.Equal(t, []string{kept}, tagged(t, base.Client(), kept), "a container's keys stay for inspection")
}

// tagged lists the keys whose names start with tag.
func tagged(t *testing.T, rdb redis.UniversalClient, tag string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(context.Background(), 0, globEscape(tag)+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		if strings.HasPrefix(iter.Val(), tag) {
			out = append(out, iter.Val())
		}
	}
	require.NoError(t, iter.Err())
	return out
}

func TestGlobEscape(t *testing.T) {
	t.Parallel()
	require.Equal(t, "{a.b}:dead", globEscape("{a.b}:dead"), "braces are plain in a glob")
	require.Equal(t, `x\*\?\[a-z\]\\y`, globEscape(`x*?[a-z]\y`))
}
