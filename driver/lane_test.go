package driver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// The read loop reads what the window offers and dispatches it; a read
// that finds nothing tells the acker the lane drained; a missing group
// stops it without CreateGroup.
func TestReadLoop(t *testing.T) {
	t.Parallel()
	t.Run("reads and dispatches", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.Concurrency = 4 })
			ids := h.srv.add(3)
			h.srv.failNext("read", nil, context.DeadlineExceeded)
			loopUntil(t, "all three read", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventRead) == 3 })
			var got []string
			for _, j := range h.s.jobs.drain() {
				got = append(got, j.m.ID)
			}
			require.Equal(t, ids, got)
			require.Equal(t, int64(3), h.l.drain.unfinished.Load())
			require.GreaterOrEqual(t, h.m.get(EventCommandError), 1)
		})
	})
	t.Run("the group is gone", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, nil)
			h.srv.failNext("read", errNoGroup)
			h.l.readLoop(t.Context(), t.Context()) // returns: stopped
			require.True(t, h.s.stopping())
			require.ErrorIs(t, h.s.stopErr, pelwarden.ErrNoGroup)
		})
	})
	t.Run("the group is gone and created again", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) { cfg.CreateGroup = true })
			h.srv.add(1)
			h.srv.failNext("read", errNoGroup)
			loopUntil(t, "read after the group was created", func(ctx context.Context) { h.l.readLoop(ctx, t.Context()) }, func() bool { return h.m.get(EventRead) == 1 })
			require.Equal(t, 1, h.srv.callCount("createGroup"))
			require.False(t, h.s.stopping())
		})
	})
	t.Run("an idle stream of several is polled", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, nil)
			cfg := testConfig(t, func(c *Config) {
				c.Stream = ""
				c.Streams = []string{"{a}", "{b}"}
				c.ReadBlock = 10 * time.Millisecond
			})
			s, l := h.session(cfg)
			require.False(t, l.single)
			loopUntil(t, "polled", func(ctx context.Context) { l.readLoop(ctx, t.Context()) }, func() bool { return h.srv.callCount("read") >= 3 })
			require.Empty(t, s.jobs.drain())
		})
	})
}

// A drained lane (nothing in hand, the last read empty) flushes its acks
// at once.
func TestLaneDrainedFlushesAcks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.AckInterval = time.Hour })
		h.srv.add(1)
		jobs := h.read(t.Context(), 1)
		h.l.acks.start(t.Context())
		h.l.drain.readIdle.Store(true)
		h.l.exec.runJob(jobs[0])
		eventually(t, "acked at once", func() bool { return len(h.srv.pendingIDs()) == 0 })
		h.l.acks.stop()
		<-h.l.acks.done()
	})
}

// commandError: counted and logged; a fatal error stops the consumer, a
// refusal for lack of memory pauses it, anything else may mean a stale
// cluster map.
func TestCommandError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		err     error
		stopped bool
		paused  bool
		stale   int
	}{
		{name: "connection", err: context.DeadlineExceeded, stale: 1},
		{name: "ACL", err: replyErr("NOPERM no permissions"), stopped: true},
		{name: "credentials", err: replyErr("WRONGPASS invalid username-password pair"), stopped: true},
		{name: "out of memory", err: replyErr("OOM command not allowed"), paused: true},
		{name: "out of memory in a function", err: &pelwarden.Error{Code: "OOM", Kind: pelwarden.ErrServer}, paused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				h.l.faults.commandError("op", c.err, 0)
				require.Equal(t, 1, h.m.get(EventCommandError))
				require.Equal(t, c.stopped, h.s.stopping())
				require.Equal(t, c.paused, h.l.flow.paused)
				require.Equal(t, c.stale, h.srv.stales)
				if c.paused {
					h.l.faults.commandError("op", c.err, 1)
					require.Equal(t, 1, h.m.get(EventPaused), "paused once")
					h.s.memoryFreed("op")
					require.False(t, h.l.flow.paused)
					require.Contains(t, h.logs.String(), "server accepts writes again")
				}
			})
		})
	}
}

// ensureGroup creates the group with CreateGroup (an existing one is
// fine) and otherwise checks it exists, naming what is missing.
func TestEnsureGroup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		create bool
		err    error
		is     error  // the result matches it
		says   string // the result's text has it
	}{
		{name: "created", create: true},
		{name: "exists already", create: true, err: replyErr("BUSYGROUP Consumer Group name already exists")},
		{name: "wrong type", create: true, err: replyErr("WRONGTYPE Operation against a key"), is: pelwarden.ErrWrongType},
		{name: "ACL", create: true, err: replyErr("NOPERM no permissions"), is: pelwarden.ErrNoPermission, says: "+xgroup|create"},
		{name: "create fails", create: true, err: context.DeadlineExceeded, is: context.DeadlineExceeded, says: "create group"},
		{name: "checked"},
		{name: "missing", err: &pelwarden.Error{Kind: pelwarden.ErrNoGroup}, is: pelwarden.ErrNoGroup, says: "set Config.CreateGroup"},
		{name: "check fails", err: context.DeadlineExceeded, is: context.DeadlineExceeded, says: "check group"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(cfg *Config) { cfg.CreateGroup = c.create })
				op := "checkGroup"
				if c.create {
					op = "createGroup"
				}
				h.srv.failNext(op, c.err)
				err := ensureGroup(t.Context(), h.srv, h.l.cfg, h.l.log)
				if c.is == nil {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, c.is)
				require.Contains(t, err.Error(), c.says)
			})
		})
	}
}

// The upkeep loop reaps dead consumers and bounds the dead-letter stream
// by age and length; failures are counted and tried again next round.
func TestUpkeep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) {
			cfg.ReapIdle = time.Minute
			cfg.DeadLetterMaxAge = time.Hour
			cfg.DeadLetterMaxLen = 3
			cfg.ReclaimInterval = time.Millisecond
		})
		h.srv.reaped = []string{"dead"}
		h.srv.dlqLen = 5
		ids := h.srv.add(1)
		h.srv.pending("idle", 1, 0, ids...)
		h.l.maint.upkeep(t.Context())
		require.Equal(t, 1, h.m.get(EventReaped))
		require.Equal(t, 1+2, h.m.get(EventDeadLetterTrimmed), "one by age, two by length")
		require.Equal(t, 1, h.srv.callCount("trimDeadLetters minid 6400000-0"), "records older than an hour before the server's time")
		require.Contains(t, h.logs.String(), "idle_consumer=idle")

		for _, op := range []string{"reap", "time"} {
			h.srv.failNext(op, context.DeadlineExceeded)
		}
		h.l.maint.upkeep(t.Context())
		h.srv.failNext("trimDeadLetters maxlen", context.DeadlineExceeded)
		h.l.maint.upkeep(t.Context())
		require.Equal(t, 3, h.m.get(EventCommandError))

		loopUntil(t, "rounds every ReclaimInterval", h.l.maint.upkeepLoop, func() bool { return h.srv.callCount("reap") >= 6 })
	})
}

// A trim pass calls the trim function until nothing below the bound is
// left; a failure ends it.
func TestTrimPass(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(cfg *Config) { cfg.TrimInterval = time.Millisecond; cfg.TrimLimit = 2 })
		ids := h.srv.add(5)
		h.read(t.Context(), 5)
		_, err := h.srv.ack(t.Context(), ids)
		require.NoError(t, err)
		h.l.maint.trimPass(t.Context())
		require.Equal(t, 5, h.m.get(EventTrimmed))
		require.Equal(t, 3, h.srv.callCount("trim"))

		h.srv.failNext("trim", context.DeadlineExceeded)
		h.l.maint.trimPass(t.Context())
		require.Equal(t, 1, h.m.get(EventCommandError))

		loopUntil(t, "trims every TrimInterval", h.l.maint.trimLoop, func() bool { return h.srv.callCount("trim") >= 7 })
	})
}
