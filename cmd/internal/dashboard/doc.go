// Package dashboard is the web dashboard of `pelwarden ui`: an http.Handler
// that shows every stream with consumer groups, a group's consumers and
// pending entries (and, for a partition in ordered mode, its lease and
// blocked head), and dead-letter records, and runs the operator actions
// (redrive, purge, poison, reap) through package ops, the same code as the
// command line.
//
// # Design
//
// Pages are rendered on the server (html/template) and refreshed in place
// by htmx (vendored, embedded: no build step, no network at run time).
// Every read is bounded: a page of the PEL (XPENDING start end count), a
// page of dead letters (XRANGE/XREVRANGE COUNT), summaries that cost one
// row per consumer (XPENDING's summary form, XINFO CONSUMERS); never a
// whole PEL or stream.
//
// Who owns what:
//
//	HTTP handlers ── read ──▶ caches (one snapshot per view, ttl Options.Refresh)
//	                               │ one loader per stale view; other viewers wait for it
//	                               ▼
//	                          Redis (the caller's client; never closed here)
//	Run's ticker ── every Refresh ──▶ overview cache (keeps the sparklines' samples coming)
//	action handlers ── start ──▶ jobs (one goroutine each; Close cancels and waits)
//
// So N viewers polling a view cost the server what one does. Actions are
// POST only, refused with ReadOnly, checked for cross-origin requests
// (net/http's CrossOriginProtection), confirmed with a count computed on
// the server, and logged (Options.Logger) with who, what and how many.
package dashboard
