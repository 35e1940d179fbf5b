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
// # What to choose
//
// Set Stream (or Streams), Group and Handler; CreateGroup creates the
// group when it is missing. The handler's error decides each entry's
// outcome: nil acks it, DeadLetter(err) moves it to the dead-letter stream
// at once, RetryAfter(d, err) retries it after d, any other error retries
// it later. Two settings shape recovery: MaxDeliveries (5), after which an
// entry is dead-lettered with the reason max_deliveries, and MinIdle (one
// minute), after which another consumer may take over an entry whose
// consumer stopped. Keep MinIdle above your slowest handler's usual time:
// the consumer extends the lease of a handler that runs longer, but a
// consumer that stalls for MinIdle loses its entries to others. Everything
// else has defaults that are meant to be kept. NewOrdered (with
// OrderedConfig) runs the entries of each key in order, one partition of a
// partitioned stream at a time per consumer.
//
// # Flow control
//
// A consumer holds a window of entries (queued for a handler or running)
// that it sizes by itself between Concurrency and MaxInHand: fast handlers
// get reads of hundreds of entries, the next one on its way while the
// handlers work on the last; slow handlers hold little more than they run,
// so other consumers of the group get the rest. Reads and claim pages also
// follow the entry size (MaxInHandBytes). New and reclaimed entries share
// the window and take turns in it.
//
// # Several streams
//
// Config.Streams runs one Consumer over several streams, typically the
// partitions of a partitioned stream (pelwarden.Partitions). Each stream
// has its own reads, reclaim passes, leases, acks and dead-letter stream,
// because a cluster keeps each partition in its own slot and refuses
// commands across slots. The streams share the window and the handlers,
// and take turns, so none starves. An idle stream is polled without BLOCK
// every ReadBlock/2, so idle streams hold no connection and no place in
// the window.
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
// groups: DeadLetterMaxAge and DeadLetterMaxLen bound it with a plain
// XTRIM every ReclaimInterval. All three are off by default: deleting data
// is asked for, never assumed.
//
// The guides (docs/guides in the repository) explain the settings and
// their trade-offs; docs/design/driver.md describes the package's parts
// for contributors.
package driver
