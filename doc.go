// Package pelwarden makes Redis Streams consumer groups safe to run in
// production: it moves the recovery loop of a consumer group (claim idle
// entries, read their delivery count, dead-letter poison entries, acknowledge)
// into one Redis Functions library, so each step is one atomic call.
//
// # Where to start
//
// Most programs need two packages built on this one: driver
// (github.com/pelwarden/pelwarden/driver), a consumer that reads, runs your
// handler, acknowledges, takes over the entries of consumers that crashed and
// dead-letters poison entries; and producer, which publishes. This package
// holds what they share, for programs and tools of your own:
//
//   - Library: the function library's calls (Claim, Ack, DeadLetter, Extend,
//     Release, Fail, Reap, Redrive, Trim, Stats), for a recovery loop of your
//     own or an operator's tool;
//   - names: DeadLetterStreamFor (a stream's dead-letter stream, in its
//     cluster slot), Partitions and PartitionFor (a partitioned stream);
//   - dead letters: ParseDeadLetter and ParseDeadLetterMessage split a
//     record into the entry's fields and why it was dead-lettered;
//   - a group's pause (PauseGroup, ResumeGroup) and limits shared by
//     consumers (SetLimit, ReadLimit).
//
// # The library
//
// The library (lua/pelwarden.lua, embedded) is loaded with Load and called
// through a Library:
//
//	lib := pelwarden.NewLibrary(rdb)
//	if _, err := lib.Load(ctx); err != nil { ... }
//	page, err := lib.Claim(ctx, pelwarden.ClaimArgs{
//		Stream: "{orders}", DeadLetterStream: "{orders}:dead",
//		Group: "billing", Consumer: "billing-1",
//		MinIdle: time.Minute, MaxDeliveries: 5,
//	})
//
// Every call loads the library again when the server lost it (a restart
// without persistence, FUNCTION FLUSH), and falls back to EVALSHA where the
// ACL refuses FUNCTION and FCALL.
//
// # Errors
//
// Errors match the sentinels of this package with errors.Is: ErrNoGroup (no
// such stream or group), ErrNoPermission (refused by the ACL),
// ErrCrossSlot (keys of one call in different cluster slots),
// ErrServerUnsupported (older than Redis 7.0, or Lua disabled), and
// ErrInvalidArgument for arguments refused before anything is sent (a
// *ArgumentError naming the field). A plain command that failed outside the
// library is a *CommandError naming the command and key; it matches the
// same sentinels.
//
// # Redis Cluster
//
// All keys of one call must hash to one Redis Cluster slot: use hash tags
// such as "{orders}" and "{orders}:dead" (DeadLetterStreamFor keeps a
// stream's dead-letter stream in its slot).
//
// Tracing and metrics of the Redis commands themselves come from go-redis
// hooks (for example redisotel); pelwarden does not rebuild them.
package pelwarden
