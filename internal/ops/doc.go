// Package ops holds the operator actions and the paged reads behind both of
// pelwarden's front ends: the command line (cmd/internal/cli) and the web
// dashboard (cmd/internal/dashboard). The group state they show
// (ReadGroups) is also what the Prometheus collector of driver/prommetrics
// exports. One implementation, two front ends: a
// redrive, a purge, a poison pass, a reap or a trim does the same thing, in
// the same pages and through the same library functions, whichever of them
// asked.
//
// Every function takes the caller's go-redis client (never closed here) and
// a context; long actions report progress through a callback called on the
// caller's goroutine after each page, and return what they did so far
// together with any error. Errors from the library keep their sentinels
// (errors.Is(err, pelwarden.ErrNoGroup)); errors from plain commands name
// the command and key and wrap the server's error (a pelwarden.CommandError,
// which also matches the sentinel its reply means: see pelwarden.Matches).
// The package never reads a reply's text itself: pelwarden.Classify and
// pelwarden.Matches are the one place that does.
//
// Reads are bounded: every function reads at most a page (or a stated
// number of pages) per call, so a 1,000,000-entry PEL or a 100,000-record
// dead-letter stream costs the server the same as a small one.
//
// The package is in the core module and imports only the root package and
// go-redis.
package ops
