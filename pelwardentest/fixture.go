package pelwardentest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// DefaultGroup is the consumer group name of a Fixture.
const DefaultGroup = "group"

// Keys are one test's own names, under one hash tag derived from the test's
// name plus random bytes, so parallel tests never share a key and the
// stream and its dead-letter stream land in one cluster slot.
type Keys struct {
	// Stream is "{<test name>.<random>}".
	Stream string
	// DeadLetterStream is pelwarden.DeadLetterStreamFor(Stream): Stream + ":dead".
	DeadLetterStream string
	// Group is DefaultGroup.
	Group string
}

// NewKeys returns fresh Keys for t. It does no I/O. When t ends, the keys
// under the tag are removed from the existing servers (PELWARDEN_TEST_REDIS_URL,
// PELWARDEN_TEST_CLUSTER_URL) fixtures used them on (see NewFixture).
func NewKeys(t T) Keys {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	if len(name) > 200 {
		name = name[len(name)-200:]
	}
	tag := "{" + name + "." + hex.EncodeToString(b) + "}"
	issueTag(t, tag)
	return Keys{Stream: tag, DeadLetterStream: pelwarden.DeadLetterStreamFor(tag), Group: DefaultGroup}
}

// DefaultWithin is how long a Fixture's waiting assertions poll when
// Within is given 0, and how long Eventually waits on a fixture without
// Within. It is generous on purpose: a deadline only costs time when the
// test fails, and a shared CI machine running tests in parallel is slow.
const DefaultWithin = 30 * time.Second

// pollInterval is the pause between two checks of a waiting assertion.
const pollInterval = 20 * time.Millisecond

// Fixture is one test's stream, dead-letter stream and consumer group on a
// Server, with helpers to arrange, act and assert. Its methods report
// failures to the T it was made for; they are safe for concurrent use.
type Fixture struct {
	// Keys are the fixture's own names.
	Keys

	srv    *Server
	t      T
	ctx    context.Context
	within time.Duration // 0: assertions check once
}

// NewFixture returns a Fixture with fresh Keys for t and creates its group
// at "0" (the stream is created empty if needed), so entries added before
// a consumer starts are delivered to it.
//
// On a server Start started (a container of this process), the keys are
// left in place after the test, for inspection; the container goes at the
// end of the run. On an existing server (PELWARDEN_TEST_REDIS_URL,
// PELWARDEN_TEST_CLUSTER_URL) they are removed when t ends: every key
// whose name starts with the fixture's hash tag (SCAN MATCH, then UNLINK),
// after the consumers the test started have stopped. Nothing else on that
// server is touched (never FLUSHDB).
func (s *Server) NewFixture(t T) *Fixture {
	t.Helper()
	f := s.FixtureFor(t, NewKeys(t))
	if err := s.client.XGroupCreateMkStream(f.ctx, f.Stream, f.Group, "0").Err(); err != nil {
		t.Fatalf("pelwardentest: create group %q on %s: %v", f.Group, f.Stream, err)
	}
	return f
}

// FixtureFor returns a Fixture on keys the caller chose; it creates
// nothing (see NewFixture). Keys from NewKeys are removed from an existing
// server when the test that made them ends, as NewFixture's are; keys
// named otherwise are left alone.
func (s *Server) FixtureFor(t T, k Keys) *Fixture {
	s.removeKeysAtCleanup(k)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &Fixture{Keys: k, srv: s, t: t, ctx: ctx}
}

// Server returns the fixture's server.
func (f *Fixture) Server() *Server { return f.srv }

// Client returns the server's client (shared; do not close it).
func (f *Fixture) Client() redis.UniversalClient { return f.srv.client }

// Context returns a context cancelled when the test ends.
func (f *Fixture) Context() context.Context { return f.ctx }

// Within returns a view of the fixture whose Require methods wait up to d
// (DefaultWithin when d is 0) for the state they describe, polling, and
// report the last state seen when it does not come.
func (f *Fixture) Within(d time.Duration) *Fixture {
	if d <= 0 {
		d = DefaultWithin
	}
	g := *f
	g.within = d
	return &g
}

// WithClient returns a view of the fixture whose helpers talk to its server
// through rdb instead of the server's client: a client with hooks, another
// ACL user's, a TLS client. Consumers RunConsumer starts on the view use
// rdb too, and Reclaim calls the library through it. rdb must reach the
// same server (or cluster), where the pelwarden library is already loaded;
// the view does not load it and does not close rdb.
func (f *Fixture) WithClient(rdb redis.UniversalClient) *Fixture {
	g := *f
	srv := *f.srv
	srv.client = rdb
	srv.lib = pelwarden.NewLibrary(rdb)
	srv.owned = false
	srv.close = nil
	g.srv = &srv
	return &g
}

// WithT returns a view of the fixture that reports to t instead, e.g. to
// check in a test what an assertion reports.
func (f *Fixture) WithT(t T) *Fixture {
	g := *f
	g.t = t
	return &g
}

func (f *Fixture) fatalf(format string, args ...any) {
	f.t.Helper()
	f.t.Fatalf("pelwardentest: "+format, args...)
}

// cmdCtx bounds one round trip.
func (f *Fixture) cmdCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(f.ctx, 30*time.Second)
}

// String names the fixture's stream and group, for messages.
func (f *Fixture) String() string {
	return fmt.Sprintf("stream %s (group %s)", f.Stream, f.Group)
}
