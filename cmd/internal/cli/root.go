// Package cli is the pelwarden command line, built with cobra: it owns the
// flags, the connection to the server (--redis, --cluster, --sentinel, TLS,
// secrets kept out of messages), the output (tables, --json, progress) and
// the exit codes. The work is done elsewhere: the operator actions (poison,
// dlq redrive and purge, reap, trim) in internal/ops, the demo scenario in
// internal/demo, the benchmarks in cmd/internal/bench. cmd/pelwarden is a thin
// main around Execute; tests run the commands in-process through
// ExecuteContext. The root package and driver never import this package
// (nor cobra).
package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pelwarden/pelwarden/internal/redact"
)

// Exit codes of the pelwarden command.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailure: the command failed at run time: the server could not be
	// reached, refused a command, or the run was interrupted.
	ExitFailure = 1
	// ExitUsage: bad arguments or flags. Nothing was contacted or changed.
	ExitUsage = 2
	// ExitBadTarget: the server has no such stream, group or record, or a key
	// holds another type. Nothing was changed.
	ExitBadTarget = 3
	// ExitLost: the demo's invariant check found entries that were lost.
	ExitLost = 4
)

// app holds the global flags and the I/O of one command line run.
type app struct {
	stdout, stderr io.Writer

	redisURL    string
	clusterURL  string
	sentinelURL string
	json        bool

	// TLS files (tls.go): --cacert, --cert, --key.
	caCert, cert, key string

	// globalFlags are the root's persistent flags (nil in unit tests).
	globalFlags *pflag.FlagSet

	// secrets are strings (passwords) scrubbed from every error message.
	secrets []string
}

// NewRootCommand returns the pelwarden root command writing to stdout and
// stderr. Its RunE errors carry exit codes; Execute and ExecuteContext turn
// them into one line on stderr and the code.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr}
	return a.rootCommand()
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pelwarden",
		Short: "Safe Redis Streams consumer groups: demo and operator commands",
		Long: `pelwarden makes Redis Streams consumer groups safe to run in production:
claim, dead-letter and acknowledge run inside the server, atomically.

Connecting: --redis URL (redis://[user:password@]host:port/db, rediss:// for
TLS), else $REDIS_URL, else redis://127.0.0.1:6379. --cluster URL connects to
a Redis Cluster through one seed node. --sentinel URL finds the primary
through Redis Sentinel:
redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[?db=N]
lists the sentinels and the name they monitor the primary under (the user
and password are the primary's; rediss-sentinel:// for TLS). Passwords never appear in output;
$REDIS_URL keeps them out of process listings too. TLS always verifies the
server's certificate: --cacert FILE (else $REDIS_CACERT) is the CA that
signed it (default: the system's CAs); --cert and --key (else $REDIS_CERT,
$REDIS_KEY) are a client certificate for servers that require one.

Exit codes: 0 ok, 1 failure (connection, TLS, server error or ACL refusal,
interrupted), 2 bad arguments or flags (nothing contacted), 3 no such
stream, group or record, or a key of the wrong type (nothing changed), 4 the
demo lost entries.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Without a subcommand: print help (and exit 0).
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v (see %s --help)", err, cmd.CommandPath())
	})
	root.CompletionOptions.DisableDefaultCmd = true

	pf := root.PersistentFlags()
	a.globalFlags = pf
	pf.StringVar(&a.redisURL, "redis", "", "server `URL`: redis://[user:password@]host:port/db, rediss:// for TLS (default $REDIS_URL, then "+defaultURL+")")
	pf.StringVar(&a.clusterURL, "cluster", "", "Redis Cluster seed node `URL`: redis://[user:password@]host:port (instead of --redis)")
	pf.StringVar(&a.sentinelURL, "sentinel", "", "Redis Sentinel `URL`: redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[?db=N] (instead of --redis)")
	pf.BoolVar(&a.json, "json", false, "print machine-readable JSON on stdout")
	pf.StringVar(&a.caCert, "cacert", "", "PEM `FILE` of the CA that signed the server's TLS certificate, for rediss:// (default $"+envCACert+", else the system's CAs)")
	pf.StringVar(&a.cert, "cert", "", "PEM `FILE` of a TLS client certificate, for servers that require one (default $"+envCert+")")
	pf.StringVar(&a.key, "key", "", "PEM `FILE` of the client certificate's private key (default $"+envKey+")")

	root.AddCommand(
		a.demoCommand(),
		a.statusCommand(),
		a.pendingCommand(),
		a.poisonCommand(),
		a.dlqCommand(),
		a.reapCommand(),
		a.pauseCommand(),
		a.limitCommand(),
		a.resumeCommand(),
		a.trimCommand(),
		a.loadCommand(),
		a.benchCommand(),
		a.uiCommand(),
		a.exporterCommand(),
		a.versionCommand(),
	)
	root.Version = buildVersion().Version
	root.SetVersionTemplate(versionLine())
	return root
}

// Execute runs the command line args (without the program name) and returns
// the exit code. SIGINT and SIGTERM cancel the running command, which then
// cleans up (a demo removes its throwaway server); a second signal ends the
// process at once.
func Execute(args []string, stdout, stderr io.Writer) int {
	// go-redis logs dial retries on its own; errors reach the user as one
	// line through the commands instead.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the command cleans up; a second one gets
		// the default behaviour and ends the process at once.
		<-ctx.Done()
		stop()
	}()
	return ExecuteContext(ctx, args, stdout, stderr)
}

// ExecuteContext is Execute with the caller's context and no signal
// handling: tests run commands in-process with it.
func ExecuteContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // errors cobra returns before a command runs
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	a.printError(err)
	return code
}

// printError writes err as one line on stderr, passwords scrubbed.
func (a *app) printError(err error) {
	msg := err.Error()
	for _, s := range a.secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redact.Placeholder)
		}
	}
	msg = redact.Message(msg)
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ; ")), " ")
	if !strings.HasPrefix(msg, "pelwarden: ") {
		msg = "pelwarden: " + msg
	}
	_, _ = io.WriteString(a.stderr, msg+"\n")
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// run wraps a command's work so that every error it returns carries an exit
// code (ExitFailure unless it says otherwise).
func run(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil {
			return nil
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return classify(err)
	}
}
