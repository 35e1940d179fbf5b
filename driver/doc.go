// Package driver is pelwarden's consumer runtime: it reads new entries of a
// Redis stream through a consumer group, runs business handlers on them with
// bounded concurrency, acknowledges in fenced batches, and reclaims entries
// abandoned by dead consumers through the pelwarden function library, which
// dead-letters poison entries atomically.
//
//	c, err := driver.New(rdb, driver.Config{
//		Stream: "{orders}", Group: "billing",
//		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
//			return bill(ctx, m)
//		}),
//	})
//	if err != nil { ... }
//	err = c.Run(ctx) // until ctx is cancelled and in-flight work is settled
//
// Delivery is at least once: a handler can see an entry again (after a
// crash, or when its lease was lost), so handlers must be idempotent; the
// stream id is the natural key. Tracing of Redis commands comes from
// go-redis hooks (redisotel); the driver adds logs (log/slog) and the
// Metrics hook.
//
// # Flow control
//
// The defaults are meant to be kept. A consumer holds a window of entries
// (queued for a handler or running) that it sizes by itself between
// Concurrency and MaxInHand: fast handlers get reads of hundreds of
// entries, the next one on its way while the handlers work on the last;
// slow handlers hold little more than they run, so other consumers of the
// group get the rest. Reads and claim pages also follow the entry size
// (MaxInHandBytes). New and reclaimed entries share the window and take
// turns in it.
//
// # Several streams
//
// Config.Streams runs one Consumer over several streams, typically the
// partitions of a partitioned stream (pelwarden.Partitions). Each stream
// gets a lane (lane.go): its own read, reclaim, lease and ack loops, its
// own entries in hand (stream ids repeat across streams) and its own
// dead-letter stream, because a cluster keeps each partition in its own
// slot and refuses commands across slots. The lanes share the window and
// the handler workers; takers of one kind queue in the window first come,
// first served, so busy streams take turns and none starves. An idle
// stream's read loop polls without BLOCK every ReadBlock/2 instead of
// blocking, so idle streams hold no connection and no place in the
// window.
//
// # How it runs
//
// Both modes share the core of a Run (core.go): loading the library and
// checking the groups, the stop and its error, the error policy for
// failed Redis calls (fatal, permanent, missing group, stale topology)
// and the pause while the server is out of memory, in which entries in
// hand still settle and no new ones are taken.
//
// An operator's pause of the group (pelwarden.PauseGroup, `pelwarden
// pause`) is read for every stream once at the start and then every second
// (pause.go); each stream's pauseGate then stops its reads and reclaim
// passes (unordered) or its owner's next calls (ordered), and holds back
// the entries not yet started, while running handlers finish, acks land
// and the entries held keep their leases. Consumer.Health (health.go)
// reports the Run's readiness and whether its loops make progress, for
// probes (HealthHandler).
//
// Under a limit (Config.Limit) the core holds the Run's permits
// (limit.go): every read and claim page, and in ordered mode every batch,
// takes its permits first and asks for no more entries than it got; a
// rate's permits carry the time each comes due, and the handler starts
// then; a handler's end gives its cap permit back, carried by the next
// acquisition or by the permits' loop, which also renews the lease and
// ends it at the stop.
//
// One unordered Run is a session (session.go): one window and Concurrency
// handler workers shared by all streams, and per stream a lane and its
// parts, each a type with the dependencies it needs and its own loop:
//
//	lane ──reads, claim pages──> dispatch ──> hand + job queue ──> workers
//	                                              executor: handler, outcome
//	acker <──────────── success ────────────────────────────────┤
//	settler <── failure, dead letter, due RetryAfter ───────────┘
//	keeper ──extend fn: the heartbeat of entries in hand
//	maintainer ──stall check, trim fn, reap fn, XTRIM of the dead letters
//
//	  - fetching, the lane (lane.go, readloop.go, reclaim.go): XREADGROUP
//	    ">" for as many entries as the window offers, blocking for one when
//	    the stream is idle; where the server has it (Redis 8.4+; the first
//	    read is the probe) the read says CLAIM MinIdle and takes idle
//	    entries over first. At start and every ReclaimInterval, when
//	    something is idle, a pass of claim-function pages. Both end in one
//	    dispatch into the hand and the job queue.
//	  - executing, the executor (work.go, with the handler API): the
//	    workers run handlers from the job queue and apply each outcome.
//	  - settling, the acker (acker.go: the acks in batches, fenced where a
//	    takeover was possible) and the settler (settle.go: failed attempts,
//	    dead letters, releases, give-backs at shutdown).
//	  - keeping, the keeper (heartbeat.go): resets the idle time of
//	    entries in hand longer than HeartbeatInterval, cancels handlers
//	    whose entry was taken over, holds long RetryAfter delays.
//	  - maintaining, the maintainer (stall.go, retention.go): the stall
//	    check unless StallAfter is NoStallCheck, the trim loop with
//	    TrimInterval, the upkeep loop with ReapIdle, DeadLetterMaxAge or
//	    DeadLetterMaxLen.
//
// The hand (hand.go) owns the entries in hand, their job queue and their
// contexts; the window (window.go) decides how many more the lane may
// fetch, and pauses it while the server refuses writes for lack of
// memory. Each part reaches the server only through its role's part of
// the laneServer (server.go), and all its time comes from the time
// package (readings through clock.go's clock), so its rules run in unit
// tests against a fake server inside testing/synctest bubbles, where that
// time is fake: timers, tickers and deadlines included. Every Redis call is retried by
// one helper (retry.go) with its own give-up rule.
//
// One new entry, from read to ack, passes through five files and three
// parts: readloop.go (the lane's read and dispatch), server.go (the
// XREADGROUP and its decoding), hand.go (in hand, queued, its context),
// work.go (the executor: its handler and outcome), acker.go (the acker:
// queued, sent, forgotten).

// # Ordered mode
//
// With NewOrdered a Run is an orderedRun (ordered.go) instead of a
// session with lanes: none of the loops above run.
//
//	balancer ──heartbeat (memberServer: MembersKey)──> share (share.go)
//	   └─ lease fn: acquire up to the share ─> one tenure per partition held
//	tenure (tenure.go) ──lease_next fn: fence, renew, acks, next batch────────┐
//	   │  (behind a call that found nothing pending: lease_next + a plain   │
//	   │  XREADGROUP in one MULTI/EXEC, LeaseNextRead)                      │
//	   │  renews (lease fn) while it waits: a place, a pause                │
//	   └─ handler on the tenure's goroutine (one of Concurrency places) <───┘
//	      leaseWatch (leasewatch.go) renews meanwhile, or cancels it
//	   hand-over (balancer or shutdown): lease_release fn with the last acks
//
//	  - ordered.go: the run, its start and shutdown, the balancer's round
//	    (heartbeat, shares, hand-overs, acquisitions).
//	  - tenure.go: one partition from acquisition to hand-over or loss: the
//	    ordered step, renewals and the local validity (PartitionLease less
//	    a quarter, from the last renewal's send), the handler, its
//	    outcome, the blocked head; leasewatch.go: the lease while a handler
//	    runs.
//	  - orderedserver.go: the seams, partitionServer and memberServer, and
//	    their Redis implementations (with the probe of MULTI/EXEC);
//	    orderedconfig.go: ordered mode's
//	    Config checks and intervals; share.go: the share rule.
//
// # Words
//
// These words mean one thing each in the driver's code and comments:
//
//   - in hand: an entry dispatched to this consumer (read or claimed) and
//     not yet settled; the hand owns them.
//   - settle: an entry in hand is settled when this consumer is done with
//     it: its outcome reached the server (acked, dead-lettered, released)
//     or it is left pending for another delivery (its lease lost, the
//     group gone, the shutdown). A handler's outcome settles its entry;
//     the acker settles the successes.
//   - release: only the library's release call (pelwarden.Library.Release),
//     which makes an entry this consumer owns claimable after a delay.
//     Ending a handler's context is finishing it (entryContext.finish).
//   - forget and gone: the hand's two ways to stop tracking a settled
//     entry: forget when it is still pending on the server, gone when it
//     left the PEL (acked, dead-lettered), which a claim under way must
//     know (see claimTicket).
//
// # Retention
//
// A stream used as a work queue grows until it is trimmed, and a blind
// XTRIM MAXLEN deletes entries a lagging group has not read (they then
// show up as deleted while pending, or are never handled). With
// TrimInterval the consumer trims only below what every consumer group of
// the stream has both delivered and acknowledged, in bounded calls of the
// library's trim function; a group that lags (a stopped service, a new
// group reading history) holds the trimming back at its position, and
// `pelwarden trim STREAM --dry-run` names it. The dead-letter stream has no
// groups: DeadLetterMaxAge and DeadLetterMaxLen bound it with a plain XTRIM
// in the upkeep loop, every ReclaimInterval. All three are off by default: deleting data is
// asked for, never assumed.
package driver
