package pelwarden

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

// LibraryName is the name of the Redis Functions library.
const LibraryName = "pelwarden"

// LibraryVersion is the version of the embedded library. Load never replaces
// a newer version on a server with this one.
const LibraryVersion = "1.4.0"

// Function names of API version 1. A later library keeps these names working.
const (
	FunctionClaim      = "pelwarden_v1_claim"
	FunctionAck        = "pelwarden_v1_ack"
	FunctionDeadLetter = "pelwarden_v1_deadletter"
	FunctionExtend     = "pelwarden_v1_extend"
	FunctionRelease    = "pelwarden_v1_release"
	FunctionReap       = "pelwarden_v1_reap"
	FunctionRedrive    = "pelwarden_v1_redrive"
	FunctionStats      = "pelwarden_v1_stats"
	FunctionVersion    = "pelwarden_v1_version"
	// FunctionTrim and FunctionTrimPlan (read only) were added in library
	// 1.1.0.
	FunctionTrim     = "pelwarden_v1_trim"
	FunctionTrimPlan = "pelwarden_v1_trim_plan"
	// FunctionLease, FunctionLeaseRelease and FunctionLeaseNext (partition
	// leases for ordered consumption) were added in library 1.2.0.
	FunctionLease        = "pelwarden_v1_lease"
	FunctionLeaseRelease = "pelwarden_v1_lease_release"
	FunctionLeaseNext    = "pelwarden_v1_lease_next"
	// FunctionFail (failed attempts: backoff from the failure, the last
	// error kept) and FunctionGiveBack (entries never started, their
	// delivery given back) were added in library 1.3.0.
	FunctionFail     = "pelwarden_v1_fail"
	FunctionGiveBack = "pelwarden_v1_giveback"
	// FunctionLimitSet, FunctionLimitAcquire, FunctionLimitRelease and
	// FunctionLimitShow (read only: limits shared by consumers) were added
	// in library 1.4.0.
	FunctionLimitSet     = "pelwarden_v1_limit_set"
	FunctionLimitAcquire = "pelwarden_v1_limit_acquire"
	FunctionLimitRelease = "pelwarden_v1_limit_release"
	FunctionLimitShow    = "pelwarden_v1_limit_show"
)

// Metadata fields appended to every dead-letter record after the entry's
// original fields. FieldMetaCount is always the last field: its value is the
// number of metadata pairs, itself included.
const (
	FieldOriginalID     = "pelwarden.original_id"
	FieldStream         = "pelwarden.stream"
	FieldGroup          = "pelwarden.group"
	FieldConsumer       = "pelwarden.consumer"
	FieldDeliveries     = "pelwarden.deliveries"
	FieldReason         = "pelwarden.reason"
	FieldError          = "pelwarden.error"
	FieldDeadLetteredAt = "pelwarden.dead_lettered_at"
	FieldMetaCount      = "pelwarden.meta"
	// FieldRedrives is added to an entry moved back by Redrive: how many
	// times it has been redriven.
	FieldRedrives = "pelwarden.redrives"
)

// Trace-context fields: a producer that carries the W3C trace context of
// its publish adds them to the entry (package producer with an injector,
// such as the OpenTelemetry module's), and a consumer's handler middleware
// reads them. They are the W3C header names, so producers in any language
// can set them. Names are reserved: pelwarden never writes other fields
// into a producer's entries.
const (
	FieldTraceParent = "traceparent"
	FieldTraceState  = "tracestate"
)

// Dead-letter reasons written by the library.
const (
	// ReasonMaxDeliveries: the entry was delivered MaxDeliveries times
	// without being acknowledged.
	ReasonMaxDeliveries = "max_deliveries"
	// ReasonHandler: a handler reported a permanent failure (the default
	// reason of DeadLetter).
	ReasonHandler = "handler"
)

// MaxErrorBytes bounds the error text stored in a dead-letter record; longer
// text is cut on a UTF-8 boundary and ends with TruncatedMarker.
const MaxErrorBytes = 4096

// TruncatedMarker ends an error text that was cut to MaxErrorBytes.
const TruncatedMarker = "...[truncated]"

// MaxReasonBytes bounds a dead-letter reason (DeadLetterArgs.Reason).
const MaxReasonBytes = 256

// MaxCount is the largest page size or id batch one call accepts.
const MaxCount = 10000

//go:embed lua/pelwarden.lua
var librarySource string

//go:embed lua/shim.lua
var shimSource string

const registerMarker = "-- @@register"

// evalSource is the library as one EVAL script: the library body (without
// the shebang and the registration) followed by the dispatch shim.
var evalSource = mustEvalSource()

func mustEvalSource() string {
	if err := checkLibrarySource(librarySource); err != nil {
		panic(err)
	}
	body, _, _ := strings.Cut(librarySource, registerMarker)
	_, body, _ = strings.Cut(body, "\n") // drop "#!lua name=pelwarden"
	return body + shimSource
}

var luaVersionRE = regexp.MustCompile(`(?m)^local LIBRARY_VERSION = '([^']+)'$`)

// checkLibrarySource validates the embedded library at init, so a broken
// bundle cannot ship: the shebang names the library, the version matches
// LibraryVersion and the registration marker is present.
func checkLibrarySource(src string) error {
	if !strings.HasPrefix(src, "#!lua name="+LibraryName+"\n") {
		return fmt.Errorf("pelwarden: embedded library does not start with #!lua name=%s", LibraryName)
	}
	m := luaVersionRE.FindStringSubmatch(src)
	if m == nil || m[1] != LibraryVersion {
		return fmt.Errorf("pelwarden: embedded library version %v does not match LibraryVersion %s", m, LibraryVersion)
	}
	if strings.Count(src, registerMarker) != 1 {
		return fmt.Errorf("pelwarden: embedded library must hold exactly one %q marker", registerMarker)
	}
	return nil
}
