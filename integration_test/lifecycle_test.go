package integration_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// eachDedicated runs fn on a server of its own per image of the matrix, for
// tests that flush, replace or restart the library or the server.
func eachDedicated(t *testing.T, opts testserver.Options, fn func(t *testing.T, srv *testserver.Server)) {
	t.Helper()
	t.Parallel()
	for _, s := range servers {
		t.Run(s.srv.Name, func(t *testing.T) {
			t.Parallel()
			srv, err := testserver.Start(t.Context(), s.srv.Image, opts)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, srv.Close()) })
			fn(t, srv)
		})
	}
}

// librarySourceAt returns the library's source with another version string.
func librarySourceAt(t *testing.T, version string) string {
	t.Helper()
	src, err := os.ReadFile("../lua/pelwarden.lua")
	require.NoError(t, err)
	old := "local LIBRARY_VERSION = '" + pelwarden.LibraryVersion + "'"
	require.Contains(t, string(src), old)
	return strings.Replace(string(src), old, "local LIBRARY_VERSION = '"+version+"'", 1)
}

func serverVersion(t *testing.T, ctx context.Context, rdb redis.Cmdable) string {
	t.Helper()
	v, err := rdb.FCallRO(ctx, pelwarden.FunctionVersion, nil).Text()
	require.NoError(t, err)
	return v
}

// Load: first load, no-op, upgrade of an older version, no downgrade of a
// newer one (whose v1 functions keep working), and 50 concurrent Loads.
func TestLoadLifecycle(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()

		res, err := pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, pelwarden.ModeFunction, res.Mode)
		require.Len(t, res.Nodes, 1)
		require.Equal(t, pelwarden.NodeLoad{Addr: "testserver", Before: "", After: pelwarden.LibraryVersion, Action: pelwarden.ActionLoaded}, res.Nodes[0])

		res, err = pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, pelwarden.ActionCurrent, res.Nodes[0].Action)

		// Upgrade: an older version is replaced.
		require.NoError(t, rdb.FunctionLoadReplace(ctx, librarySourceAt(t, "0.9.0")).Err())
		require.Equal(t, "0.9.0", serverVersion(t, ctx, rdb))
		res, err = pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, pelwarden.NodeLoad{Addr: "testserver", Before: "0.9.0", After: pelwarden.LibraryVersion, Action: pelwarden.ActionUpgraded}, res.Nodes[0])

		// No downgrade: a newer version stays, and this caller keeps working
		// through the versioned v1 names.
		require.NoError(t, rdb.FunctionLoadReplace(ctx, librarySourceAt(t, "1.10.0")).Err())
		res, err = pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, pelwarden.ActionKeptNewer, res.Nodes[0].Action)
		require.Equal(t, "1.10.0", res.Nodes[0].After)
		require.Equal(t, "1.10.0", serverVersion(t, ctx, rdb))
		f := pelwardentest.Use(t, rdb).NewFixture(t)
		f.Produce(3, order)
		f.LeavePending("a", 3)
		lib := pelwarden.NewLibrary(rdb)
		p, err := lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b"})
		require.NoError(t, err)
		require.Len(t, p.Entries, 3)

		// Fifty processes (each with its own client) loading at once, on an
		// empty server, all succeed.
		require.NoError(t, rdb.FunctionFlush(ctx).Err())
		var wg sync.WaitGroup
		errs := make([]error, 50)
		actions := make([]pelwarden.LoadAction, 50)
		for i := range errs {
			wg.Go(func() {
				c := srv.Client()
				defer c.Close()
				r, err := pelwarden.Load(ctx, c)
				errs[i] = err
				if err == nil {
					actions[i] = r.Nodes[0].Action
				}
			})
		}
		wg.Wait()
		loaded := 0
		for i, err := range errs {
			require.NoError(t, err, "loader %d", i)
			require.Contains(t, []pelwarden.LoadAction{pelwarden.ActionLoaded, pelwarden.ActionCurrent}, actions[i])
			if actions[i] == pelwarden.ActionLoaded {
				loaded++
			}
		}
		require.GreaterOrEqual(t, loaded, 1)
		require.Equal(t, pelwarden.LibraryVersion, serverVersion(t, ctx, rdb))
	})
}

// FUNCTION FLUSH while a Library is in use: the next call reloads the library
// and succeeds, invisibly to the caller.
func TestSelfHealAfterFunctionFlush(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()
		lib := pelwarden.NewLibrary(rdb)
		_, err := lib.Load(ctx)
		require.NoError(t, err)
		f := pelwardentest.Use(t, rdb).NewFixture(t)
		ids := f.Produce(4, order)
		f.LeavePending("a", 4)

		require.NoError(t, rdb.FunctionFlush(ctx).Err())
		r, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "a", IDs: ids[:2]})
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Acked)
		require.Equal(t, pelwarden.LibraryVersion, serverVersion(t, ctx, rdb))

		// Concurrent callers after a flush all succeed too.
		require.NoError(t, rdb.FunctionFlush(ctx).Err())
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = lib.Stats(ctx, pelwarden.StatsArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group})
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
	})
}

// A restart without persistence loses the data and the library; the client
// reconnects and the next call reloads the library by itself.
func TestSelfHealAfterRestart(t *testing.T) {
	eachDedicated(t, testserver.Options{}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()
		lib := pelwarden.NewLibrary(rdb)
		_, err := lib.Load(ctx)
		require.NoError(t, err)
		require.NoError(t, srv.Restart(ctx))

		require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 30*time.Second, 100*time.Millisecond)
		v, err := lib.Version(ctx)
		require.NoError(t, err)
		require.Equal(t, pelwarden.LibraryVersion, v)
		f := pelwardentest.Use(t, rdb).NewFixture(t)
		f.Produce(2, order)
		f.LeavePending("a", 2)
		p, err := lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "b"})
		require.NoError(t, err)
		require.Len(t, p.Entries, 2)
	})
}

// With AOF on, the library survives a restart with the data.
func TestLibrarySurvivesRestartWithAOF(t *testing.T) {
	eachDedicated(t, testserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--dir", "/tmp"}}, func(t *testing.T, srv *testserver.Server) {
		ctx := t.Context()
		rdb := srv.Client()
		defer rdb.Close()
		_, err := pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		f := pelwardentest.Use(t, rdb).NewFixture(t)
		f.Produce(2, order)
		require.NoError(t, srv.Restart(ctx))
		require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 30*time.Second, 100*time.Millisecond)
		require.Equal(t, pelwarden.LibraryVersion, serverVersion(t, ctx, rdb), "library persisted in the AOF")
		n, err := rdb.XLen(ctx, f.Stream).Result()
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
	})
}

// An ACL user refused FUNCTION and FCALL gets the EVALSHA fallback, chosen
// automatically and reported; every function works through it.
func TestEvalFallbackForRestrictedUser(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t) // arranged by the admin client
		rdb := restrictedClient(t, ctx, s, "noscript-"+strings.Trim(f.Stream, "{}"), "-function", "-fcall", "-fcall_ro")
		require.True(t, redis.HasErrorPrefix(rdb.FCallRO(ctx, pelwarden.FunctionVersion, nil).Err(), "NOPERM"))

		lib := pelwarden.NewLibrary(rdb)
		res, err := lib.Load(ctx)
		require.NoError(t, err)
		require.Equal(t, pelwarden.ModeEval, res.Mode)
		require.Equal(t, pelwarden.ActionEval, res.Nodes[0].Action)
		require.Equal(t, pelwarden.ModeEval, lib.Mode())

		v, err := lib.Version(ctx)
		require.NoError(t, err)
		require.Equal(t, pelwarden.LibraryVersion, v)
		ids := f.Produce(10, order)
		f.LeavePending("dead", 10)
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: f.Stream, Group: f.Group, Consumer: "dead", Messages: ids[:3]}).Err())
		p, err := lib.Claim(ctx, pelwarden.ClaimArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c", MaxDeliveries: 2})
		require.NoError(t, err)
		require.Equal(t, ids[:3], p.DeadLettered)
		require.Len(t, p.Entries, 7)
		var live []string
		for _, e := range p.Entries {
			live = append(live, e.ID)
		}
		a, err := lib.Ack(ctx, pelwarden.AckArgs{Stream: f.Stream, Group: f.Group, Consumer: "c", IDs: live[:5]})
		require.NoError(t, err)
		require.EqualValues(t, 5, a.Acked)
		d, err := lib.DeadLetter(ctx, pelwarden.DeadLetterArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group, Consumer: "c", IDs: live[5:], Error: "bad"})
		require.NoError(t, err)
		require.Len(t, d.DeadLettered, 2)
		st, err := lib.Stats(ctx, pelwarden.StatsArgs{Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: f.Group})
		require.NoError(t, err)
		require.Zero(t, st.Pending)
		require.EqualValues(t, 5, st.DeadLetterLength)
		_, err = lib.Claim(ctx, pelwarden.ClaimArgs{MaxDeliveries: pelwarden.NoDeliveryLimit, Stream: f.Stream, DeadLetterStream: f.DeadLetterStream, Group: "nope", Consumer: "c"})
		require.ErrorIs(t, err, pelwarden.ErrNoGroup, "library errors come through the shim unchanged")
		// SCRIPT FLUSH is survived too (EVALSHA falls back to EVAL).
		require.NoError(t, s.rdb.ScriptFlush(ctx).Err())
		_, err = lib.Version(ctx)
		require.NoError(t, err)
	})
}

// A user refused FUNCTION (but allowed FCALL) on a server where an
// administrator loaded the library keeps function mode.
func TestAdminLoadedLibraryForRestrictedUser(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t) // arranged by the admin client
		rdb := restrictedClient(t, ctx, s, "nofunction-"+strings.Trim(f.Stream, "{}"), "-function")
		res, err := pelwarden.Load(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, pelwarden.ModeFunction, res.Mode)
	})
}

// A user refused all scripting gets ErrServerUnsupported, saying why.
func TestNoScriptingAtAll(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		f := s.fixture(t) // arranged by the admin client
		rdb := restrictedClient(t, ctx, s, "noscripting-"+strings.Trim(f.Stream, "{}"), "-@scripting")
		_, err := pelwarden.Load(ctx, rdb)
		require.ErrorIs(t, err, pelwarden.ErrServerUnsupported)
		require.Contains(t, err.Error(), "EVAL refused")
	})
}

// restrictedClient returns a client logged in as a new ACL user with every
// permission but the given ACL rules (the user is deleted at the end).
func restrictedClient(t *testing.T, ctx context.Context, s *target, user string, rules ...any) *redis.Client {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all"}, rules...)
	require.NoError(t, s.rdb.Do(ctx, args...).Err())
	t.Cleanup(func() { s.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	opts := s.srv.Options()
	opts.Username, opts.Password = user, "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// A server older than 7.0 gets a clear ErrServerUnsupported.
func TestServerTooOld(t *testing.T) {
	t.Parallel()
	image := os.Getenv("PELWARDEN_OLD_IMAGE")
	if image == "" {
		image = "pelwarden/redis:6.0"
	}
	if image == "none" {
		t.Skip("PELWARDEN_OLD_IMAGE=none: no pre-7.0 server to test against")
	}
	ctx := t.Context()
	srv, err := testserver.Start(ctx, image, testserver.Options{})
	require.NoError(t, err, "build it with scripts/images.sh, or set PELWARDEN_OLD_IMAGE=none")
	defer func() { require.NoError(t, srv.Close()) }()
	rdb := srv.Client()
	defer rdb.Close()
	_, err = pelwarden.Load(ctx, rdb)
	require.ErrorIs(t, err, pelwarden.ErrServerUnsupported)
	require.Contains(t, err.Error(), "needs Redis 7.0+")
	t.Log(err)
}
