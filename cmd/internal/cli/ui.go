package cli

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden/cmd/internal/dashboard"
)

// Environment variables of `pelwarden ui`'s basic authentication.
const (
	envUIUser     = "PELWARDEN_UI_USER"
	envUIPassword = "PELWARDEN_UI_PASSWORD"
)

// uiOptions are the flags of `pelwarden ui`.
type uiOptions struct {
	listen, basePath, streams string
	readOnly                  bool
	refresh, minIdle          time.Duration
	stuckAfter                time.Duration
	maxDeliveries             int
}

func (a *app) uiCommand() *cobra.Command {
	var o uiOptions
	cmd := &cobra.Command{
		Use:   "ui [--listen ADDR] [--read-only] [--base-path PATH] [--streams GLOB]",
		Short: "Serve the web dashboard: groups, pending entries, dead letters, actions",
		Long: `ui serves a web dashboard from this binary (no build step, no network access:
every asset is embedded). The overview lists every stream with consumer
groups (a bounded SCAN ... TYPE stream on every primary, or the streams
matching --streams) with length, lag, pending, the oldest pending entry's
age, consumers, stalled consumers, dead letters and rates with sparklines;
a group's page shows its consumers and pages through its PEL; the dead
letters page pages through records, filters by reason and looks up ids.
Pages refresh in place, from one snapshot per view shared by every viewer.

Actions (redrive, purge, poison, reap) run the same code as the commands of
the same name, after a confirmation that states how many entries they
touch; --read-only removes and refuses them. Every action is logged on
stderr with who ran it.

Authentication: set $` + envUIUser + ` and $` + envUIPassword + ` to require HTTP
basic authentication. Listening on anything but a loopback address without
them is refused. Behind a reverse proxy that forwards a path prefix, give
it with --base-path (e.g. /pelwarden): every link, asset and action is
under it. Serve it over TLS at the proxy: basic authentication sends the
password with every request.`,
		Example: `  pelwarden ui                                   # http://127.0.0.1:8080/
  pelwarden ui --read-only --streams '{orders}*'
  PELWARDEN_UI_USER=ops PELWARDEN_UI_PASSWORD=... pelwarden ui --listen :8080 --base-path /pelwarden`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			do, err := a.uiDashboardOptions(cmd, o)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rdb, e, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			s, err := dashboard.New(rdb, do)
			if err != nil {
				return usageErrorf("%v", err)
			}
			ln, err := net.Listen("tcp", o.listen)
			if err != nil {
				return failuref("cannot listen on %s: %v", o.listen, err)
			}
			mode := ""
			if o.readOnly {
				mode = " (read-only)"
			}
			auth := "no authentication (loopback only)"
			if do.Auth != nil {
				auth = "basic authentication as " + do.Auth.User
			}
			fmt.Fprintf(a.stderr, "pelwarden ui: serving %s on http://%s%s/%s, %s; Ctrl-C stops\n", e.shown, ln.Addr(), do.BasePath, mode, auth)
			if err := s.Serve(ctx, ln); err != nil {
				return failuref("serving the dashboard: %v", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "`ADDR` to listen on (host:port); other than loopback only with $"+envUIUser+" and $"+envUIPassword)
	f.BoolVar(&o.readOnly, "read-only", false, "show no actions and refuse them")
	f.StringVar(&o.basePath, "base-path", "", "`PATH` prefix of every page, asset and action, behind a reverse proxy (e.g. /pelwarden)")
	f.StringVar(&o.streams, "streams", "", "show only streams matching this `GLOB` (SCAN MATCH syntax; default: every stream with groups)")
	f.DurationVar(&o.refresh, "refresh", dashboard.DefaultRefresh, "how often views refresh (one read of the server per view, whatever the number of viewers)")
	f.DurationVar(&o.minIdle, "min-idle", dashboard.DefaultMinIdle, "flag consumers that own entries and have been idle this long as stalled (pages can change it)")
	f.DurationVar(&o.stuckAfter, "stuck-after", dashboard.DefaultStuckAfter, "list pending entries idle this long as stuck: no reclaim pass took them (the driver's default StallAfter; pages can change it)")
	f.IntVar(&o.maxDeliveries, "max-deliveries", dashboard.DefaultMaxDeliveries, "highlight pending entries delivered this many times as poison (pages can change it)")
	return cmd
}

// uiDashboardOptions checks the flags and the environment (before
// connecting) and returns the dashboard's options.
func (a *app) uiDashboardOptions(cmd *cobra.Command, o uiOptions) (dashboard.Options, error) {
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return dashboard.Options{}, usageErrorf("--listen %q: want host:port, such as 127.0.0.1:8080 (%v)", o.listen, err)
	}
	if o.basePath != "" && !strings.HasPrefix(o.basePath, "/") {
		return dashboard.Options{}, usageErrorf("--base-path must start with /, got %q", o.basePath)
	}
	if err := nonEmptyFlag(cmd, "streams", o.streams); err != nil {
		return dashboard.Options{}, err
	}
	if o.refresh < 100*time.Millisecond {
		return dashboard.Options{}, usageErrorf("--refresh must be at least 100ms, got %v", o.refresh)
	}
	if err := positiveDuration("min-idle", o.minIdle); err != nil {
		return dashboard.Options{}, err
	}
	if err := positiveDuration("stuck-after", o.stuckAfter); err != nil {
		return dashboard.Options{}, err
	}
	if err := positiveInt("max-deliveries", o.maxDeliveries); err != nil {
		return dashboard.Options{}, err
	}
	user, pass := os.Getenv(envUIUser), os.Getenv(envUIPassword)
	a.secrets = append(a.secrets, pass)
	if (user == "") != (pass == "") {
		return dashboard.Options{}, usageErrorf("set both $%s and $%s for basic authentication, or neither", envUIUser, envUIPassword)
	}
	do := dashboard.Options{
		BasePath: o.basePath, ReadOnly: o.readOnly, Streams: o.streams, Refresh: o.refresh,
		MinIdle: o.minIdle, StuckAfter: o.stuckAfter, MaxDeliveries: o.maxDeliveries,
		Logger: slog.New(slog.NewTextHandler(a.stderr, nil)),
	}
	if user != "" {
		do.Auth = &dashboard.BasicAuth{User: user, Password: pass}
	} else if !isLoopback(host) {
		return dashboard.Options{}, usageErrorf("refusing to serve the dashboard on %s without authentication: anyone who can reach it could read "+
			"and move your entries; set $%s and $%s (basic authentication), or listen on a loopback address such as 127.0.0.1:8080",
			o.listen, envUIUser, envUIPassword)
	}
	if err := do.Validate(); err != nil {
		return dashboard.Options{}, usageErrorf("%v", err)
	}
	return do, nil
}

// isLoopback reports whether a listen host reaches this machine only:
// "localhost" or a loopback IP. "" (every interface) and other names do not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
