// Package pelwarden makes Redis Streams consumer groups safe to run in
// production: it moves the recovery loop of a consumer group (claim idle
// entries, read their delivery count, dead-letter poison entries, acknowledge)
// into one Redis Functions library, so each step is one atomic call.
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
// Every call self-heals when the server lost the library, and errors match
// the sentinel errors of this package with errors.Is. The consumer runtime
// built on it lives in package driver.
//
// All keys of one call must hash to one Redis Cluster slot: use hash tags
// such as "{orders}" and "{orders}:dead".
//
// Tracing and metrics of the Redis commands themselves come from go-redis
// hooks (for example redisotel); pelwarden does not rebuild them.
package pelwarden
