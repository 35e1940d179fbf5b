package dashboard

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/internal/ops"
)

// Defaults of Options.
const (
	// DefaultRefresh is how often a view's shared snapshot is refreshed.
	DefaultRefresh = 2 * time.Second
	// DefaultHistory is how far back the overview's sparklines reach.
	DefaultHistory = 10 * time.Minute
	// DefaultDiscoverEvery is how often the stream list is rebuilt.
	DefaultDiscoverEvery = 30 * time.Second
	// DefaultMinIdle flags consumers that own entries and have been idle
	// this long as stalled (the group page can set another).
	DefaultMinIdle = time.Minute
	// DefaultStuckAfter lists pending entries idle this long as stuck on
	// the group page: the driver's default StallAfter, past which its
	// stall check reports them (the group page can set another).
	DefaultStuckAfter = driver.DefaultMinIdle + 3*driver.DefaultReclaimInterval
	// DefaultMaxDeliveries highlights pending entries delivered this many
	// times as poison (the group page can set another).
	DefaultMaxDeliveries = pelwarden.DefaultMaxDeliveries
	// DefaultPageSize is the rows of a PEL or dead-letter page.
	DefaultPageSize = 50
	// DefaultFilterScan bounds the dead-letter records one filtered page
	// reads (a reason filter scans at most this many, then says so).
	DefaultFilterScan = 5000
	// DefaultCountLimit bounds the entries a confirmation step counts.
	DefaultCountLimit = 50_000
	// DefaultMaxStreams bounds the streams the overview shows.
	DefaultMaxStreams = 500
	// MaxPageSize bounds Options.PageSize and the page size a URL asks for.
	MaxPageSize = 500
)

// Options configure a dashboard. The zero value of a field means its
// documented default.
type Options struct {
	// BasePath is the path prefix every page, asset and action lives
	// under, e.g. "/pelwarden" behind a reverse proxy that forwards that
	// prefix. Defaults to "" (the root). Must start with "/" when set; a
	// trailing "/" is dropped.
	BasePath string
	// ReadOnly removes every action from the pages and refuses them (405
	// for a method other than POST, 403 for a POST).
	ReadOnly bool
	// Auth, when set, requires HTTP basic authentication.
	Auth *BasicAuth
	// Streams is a glob (SCAN MATCH syntax) the streams shown must match.
	// Defaults to "*": every stream with consumer groups.
	Streams string
	// ScanKeys bounds the keys a discovery walks per primary. Defaults to
	// ops.DefaultScanKeys.
	ScanKeys int64
	// MaxStreams bounds the streams shown. Defaults to DefaultMaxStreams.
	MaxStreams int
	// Refresh is how often a view's shared snapshot is refreshed: however
	// many viewers poll it, the server is read at most once per Refresh
	// per view. Defaults to DefaultRefresh.
	Refresh time.Duration
	// History is the span of the overview's sparklines and rates.
	// Defaults to DefaultHistory.
	History time.Duration
	// DiscoverEvery is how often the stream list is rebuilt. Defaults to
	// DefaultDiscoverEvery.
	DiscoverEvery time.Duration
	// MinIdle is the default stalled threshold. Defaults to DefaultMinIdle.
	MinIdle time.Duration
	// StuckAfter is the default stuck threshold: pending entries idle this
	// long are listed as stuck. It is idle time alone: the dashboard cannot
	// see a consumer's sweeps of the PEL, so the entries of a backlog still
	// being drained are listed too, where the driver's stall check (which
	// also waits for a completed sweep to leave an entry) reports none.
	// Defaults to DefaultStuckAfter.
	StuckAfter time.Duration
	// MaxDeliveries is the default poison threshold. Defaults to
	// DefaultMaxDeliveries.
	MaxDeliveries int
	// PageSize is the rows of a page. Defaults to DefaultPageSize.
	PageSize int
	// FilterScan bounds the records a filtered dead-letter page reads.
	// Defaults to DefaultFilterScan.
	FilterScan int
	// CountLimit bounds the entries a confirmation step counts. Defaults
	// to DefaultCountLimit.
	CountLimit int64
	// RedriveRate is the default rate of a redrive (records per second).
	// Defaults to ops.DefaultRedriveRate.
	RedriveRate float64
	// Logger receives one record per action (who, what, how many) and the
	// refresh errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// BasicAuth is a user name and password for HTTP basic authentication.
type BasicAuth struct {
	User, Password string
}

// WithDefaults returns a copy of o with every zero field set to its
// default.
func (o Options) WithDefaults() Options {
	o.BasePath = strings.TrimRight(o.BasePath, "/")
	if o.Streams == "" {
		o.Streams = "*"
	}
	if o.ScanKeys <= 0 {
		o.ScanKeys = ops.DefaultScanKeys
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.DiscoverEvery <= 0 {
		o.DiscoverEvery = DefaultDiscoverEvery
	}
	if o.MinIdle <= 0 {
		o.MinIdle = DefaultMinIdle
	}
	if o.StuckAfter <= 0 {
		o.StuckAfter = DefaultStuckAfter
	}
	if o.MaxDeliveries <= 0 {
		o.MaxDeliveries = DefaultMaxDeliveries
	}
	if o.PageSize <= 0 {
		o.PageSize = DefaultPageSize
	}
	if o.FilterScan <= 0 {
		o.FilterScan = DefaultFilterScan
	}
	if o.CountLimit <= 0 {
		o.CountLimit = DefaultCountLimit
	}
	if o.RedriveRate <= 0 {
		o.RedriveRate = ops.DefaultRedriveRate
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// configError is an option New refuses: a *pelwarden.ArgumentError naming
// it ("BasePath").
func configError(field, reason string) error {
	return &pelwarden.ArgumentError{Scope: "dashboard", Field: field, Reason: reason}
}

// validate checks options that have had their defaults applied.
func (o Options) validate() error {
	if o.BasePath != "" && (!strings.HasPrefix(o.BasePath, "/") || strings.ContainsAny(o.BasePath, "?#\"'<> ")) {
		return configError("BasePath", fmt.Sprintf("must be a path starting with / (no query, quotes or spaces), got %q", o.BasePath))
	}
	if o.Auth != nil && (o.Auth.User == "" || o.Auth.Password == "") {
		return configError("Auth", "needs both a user and a password")
	}
	if o.PageSize > MaxPageSize {
		return configError("PageSize", fmt.Sprintf("must be at most %d, got %d", MaxPageSize, o.PageSize))
	}
	if o.RedriveRate > ops.MaxRedriveRate {
		return configError("RedriveRate", fmt.Sprintf("must be at most %v, got %v", ops.MaxRedriveRate, o.RedriveRate))
	}
	return nil
}

// Validate reports, as a *pelwarden.ArgumentError naming the field, an option New
// would refuse (after applying the defaults).
func (o Options) Validate() error { return o.WithDefaults().validate() }
