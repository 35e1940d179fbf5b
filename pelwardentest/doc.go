// Package pelwardentest helps users of pelwarden test their own handlers
// against a real Redis (or Valkey) server, in the spirit of river's
// rivertest:
//
//	func TestMain(m *testing.M) { pelwardentest.Main(m) }
//
//	func TestBadOrders(t *testing.T) {
//		t.Parallel()
//		f := pelwardentest.Start(t).NewFixture(t) // own stream, group, dead-letter stream
//		bad := f.Add("order", "not-a-number")      // arrange
//		f.RunConsumer(driver.Config{Handler: myHandler, MaxDeliveries: 3}) // act
//		f.Within(10*time.Second).RequireDeadLettered(bad, pelwardentest.DeadLettered{
//			Reason: pelwarden.ReasonMaxDeliveries}) // assert
//	}
//
// Start returns a Server: one container per image and topology, shared by
// every test of the process, started on first use with the pelwarden
// library loaded, and removed by Main once the tests are done. The image
// is WithImage's, else PELWARDEN_TEST_IMAGE, else DefaultImage
// ("redis:8"); WithValkey and WithCluster choose Valkey and a
// three-primary Redis Cluster. PELWARDEN_TEST_REDIS_URL (or
// PELWARDEN_TEST_CLUSTER_URL with WithCluster) points Start at an existing
// server instead, such as a CI service or a local redis-server: nothing is
// started, tests stay apart through their keys, and each test's keys (those
// under its fixture's hash tag, see NewKeys) are removed from that server
// when the test ends; nothing else is touched (never FLUSHDB). Keys on a
// container Start started stay until the container goes, for inspection.
// When no container can be started (Docker unreachable, or an image it can
// neither find nor pull), the test fails with a message saying how to go
// on: set PELWARDEN_TEST_REDIS_URL, or make an image available (docker pull,
// or a one-line docker build from Debian's package) and name it in
// PELWARDEN_TEST_IMAGE. Use wraps a client you already have.
//
// A Fixture is one test's own hash-tagged stream, dead-letter stream and
// group (so tests can run with t.Parallel()), with helpers to arrange
// entries (Add, Produce, LeavePending, SetDeliveries), to act (RunConsumer,
// ConsumerConfig, Reclaim; WithClient for another client) and to assert on
// what the server holds (RequireAcked, RequirePending, RequireDeadLettered,
// RequireDeadLetterIDs, RequirePELEmpty; PendingEntry, PendingCount,
// PendingEntries, DeadLetters to read it). Assertions fail the test with
// Fatalf and a message saying what was expected and what the stream
// actually holds; Fixture.Within makes them wait for the state, polling
// with a bound, and report the last state seen. Eventually waits the same
// way for anything else, such as the counts a Metrics or a Calls recorded.
//
// The test timings (TestMinIdle, TestReclaimInterval, TestReadBlock,
// TestShutdownTimeout, DefaultWithin) are defined here once; pelwarden's
// own integration suite uses them too.
//
// Helpers take a T, the subset of testing.TB they use, so *testing.T,
// *testing.B and test doubles all fit.
//
// This package imports testcontainers-go; import it from _test.go files
// only. The root package and driver never import it.
package pelwardentest
