// Command consume runs the consume benchmark of BENCHMARKS.md (rows 9-20 and
// 31): the driver with its defaults against a raw go-redis loop and
// watermill-redisstream on new entries, a dead consumer's PEL against the
// claim function's page loop and the textbook loop, memory as the PEL
// grows, acks, two consumers with slow handlers and large entries, with
// the heap sampled and, if asked, CPU profiles of the driver's runs. It
// prints the tables with ratios and targets (package
// benchmarks/internal/consume).
//
// It lives in the benchmarks module, which is never published: the
// pelwarden CLI (`pelwarden bench`, the reclaim suite) links no Watermill.
// Run it from the repository (go.work resolves the modules):
//
//	make bench BENCH_SUITE=consume BENCH_FLAGS='--parts main'
//	go run ./benchmarks/cmd/consume --parts reclaim --rounds 1
//
// Without --redis it starts a throwaway container from $PELWARDEN_BENCH_IMAGE
// (default pelwarden/redis:8.0, built by scripts/images.sh) and removes it
// at the end; with --redis it creates keys {pwconsume-…} and deletes them.
// Exit codes: 0 ok, 1 failure, 2 bad flags (nothing started).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/pelwarden/pelwarden/benchmarks/internal/consume"
	"github.com/pelwarden/pelwarden/internal/progress"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// maxEntries bounds --entries and --reclaim-entries: each entry is written
// to the server (about 200 bytes with its PEL entry), per method.
const maxEntries = 10_000_000

// defaultImage is the image of the throwaway server without
// $PELWARDEN_BENCH_IMAGE.
const defaultImage = "pelwarden/redis:8.0"

// envImage names the throwaway server's image.
const envImage = "PELWARDEN_BENCH_IMAGE"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal the run stops and removes its server; a
		// second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the flags.
type options struct {
	redisURL                string
	entries, reclaimEntries int
	rounds                  int
	parts, drivers          string
	watermill               bool
	profileDir              string
	jsonPath                string
}

// usageError is a bad flag: nothing was started.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./benchmarks/cmd/consume [flags]\n\n"+
			"The consume benchmark of BENCHMARKS.md: the driver with its defaults against a\n"+
			"raw loop and watermill-redisstream, a dead consumer's PEL, memory as the PEL\n"+
			"grows, acks, slow handlers and large entries. Without --redis: a throwaway\n"+
			"container from $%s (default %s).\n\nFlags:\n", envImage, defaultImage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.redisURL, "redis", "", "an existing server's `URL` (redis://host:port/db, rediss:// for TLS, or host:port); keys {pwconsume-…} are created and deleted")
	fs.StringVar(&o.parts, "parts", "all", "comma-separated parts: main, reclaim, pel, ack, slow, large")
	fs.IntVar(&o.entries, "entries", consume.DefaultEntries, "stream size per method of the main part")
	fs.StringVar(&o.drivers, "drivers", consume.DefaultDriversSpec, "driver configurations of the main part, comma-separated, each \"default\" (every field at its default) or options joined by /: c=N, p=N, r=N, plain or fenced, noreadclaim (Concurrency, Prefetch, ReadCount, AckMode, ReadClaim off; an option left out keeps the default)")
	fs.IntVar(&o.rounds, "rounds", 5, "run the methods of the main and reclaim parts this many times, interleaved, and report the median of each (watermill runs once); the slow part runs this many times")
	fs.BoolVar(&o.watermill, "watermill", true, "include watermill-redisstream in the main part (over a minute)")
	fs.IntVar(&o.reclaimEntries, "reclaim-entries", consume.DefaultReclaimEntries, "PEL size of the reclaim part (make bench-drain: 1000000)")
	fs.StringVar(&o.profileDir, "profile-dir", "", "write a CPU profile and an allocation profile of each driver run and raw loop of the main part to this `directory`")
	fs.StringVar(&o.jsonPath, "json", "", "also write every result as JSON to this `file` (the headline report reads it: make bench-report)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage // the flag package printed the error and the usage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "consume: unexpected argument %q (flags only; see -help)\n", fs.Arg(0))
		return exitUsage
	}
	err := runBench(ctx, o, stdout, stderr)
	if err == nil {
		return exitOK
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "consume: ") {
		msg = "consume: " + msg
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "%s (see -help)\n", msg)
		return exitUsage
	}
	fmt.Fprintln(stderr, msg)
	return exitFailure
}

// config checks the flags and turns them into the suite's Config (without
// the server).
func (o options) config() (consume.Config, error) {
	for _, n := range []struct {
		name string
		v    int
	}{{"entries", o.entries}, {"reclaim-entries", o.reclaimEntries}} {
		if n.v < 1 || n.v > maxEntries {
			return consume.Config{}, usagef("--%s must be between 1 and %d, got %d", n.name, maxEntries, n.v)
		}
	}
	if o.rounds < 1 || o.rounds > 100 {
		return consume.Config{}, usagef("--rounds must be between 1 and 100, got %d", o.rounds)
	}
	for _, n := range []struct{ name, v string }{{"parts", o.parts}, {"drivers", o.drivers}} {
		if strings.TrimSpace(n.v) == "" {
			return consume.Config{}, usagef("--%s must not be empty", n.name)
		}
	}
	parts, err := consume.ParseParts(o.parts)
	if err != nil {
		return consume.Config{}, usagef("--parts: %s", strings.TrimPrefix(err.Error(), "consume: "))
	}
	drivers, err := consume.ParseDrivers(o.drivers)
	if err != nil {
		return consume.Config{}, usagef("--drivers: %s", strings.TrimPrefix(err.Error(), "consume: "))
	}
	return consume.Config{
		Parts: parts, Drivers: drivers, Rounds: o.rounds, Entries: o.entries,
		SkipWatermill: !o.watermill, ReclaimEntries: o.reclaimEntries, ProfileDir: o.profileDir,
	}, nil
}

// runBench checks the flags, finds the server, runs the suite and prints
// its table.
func runBench(ctx context.Context, o options, stdout, stderr io.Writer) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	var opts *redis.Options
	if o.redisURL != "" {
		raw := o.redisURL
		if !strings.Contains(raw, "://") {
			raw = "redis://" + raw
		}
		if opts, err = redis.ParseURL(raw); err != nil {
			return usagef("--redis: %v", err)
		}
	}

	// go-redis logs dial retries on its own; testcontainers logs each step
	// of a container's start. Errors reach the user through the run.
	redis.SetLogger(quietLogger{})
	tclog.SetDefault(tclog.NewNoopLogger())
	live := progress.New(stderr, 0)
	defer live.Close()
	cfg.Logf = func(format string, args ...any) { live.Event(fmt.Sprintf(format, args...)) }

	if opts == nil {
		image := defaultImage
		if v := strings.TrimSpace(os.Getenv(envImage)); v != "" {
			image = v
		}
		live.Event("starting a throwaway container from " + image)
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		srv, err := testserver.Start(sctx, image, testserver.Options{})
		cancel()
		if err != nil {
			return fmt.Errorf("%w (build the image with ./scripts/images.sh %s, set %s, or pass --redis URL)", err, image, envImage)
		}
		defer func() {
			if err := srv.Close(); err != nil {
				fmt.Fprintf(stderr, "consume: %v\n", err)
			}
		}()
		addr, err := srv.Addr(ctx)
		if err != nil {
			return err
		}
		// A plain address: the server's port does not change during the
		// run, and the measured clients should dial as a user's would.
		opts = &redis.Options{Addr: addr}
		cfg.ServerLabel = fmt.Sprintf("container %s on %s", image, addr)
	} else {
		rdb := redis.NewClient(opts)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("--redis %s: %w", opts.Addr, err)
		}
		cfg.ServerLabel = opts.Addr
	}
	cfg.Options = opts

	rep, err := consume.Run(ctx, cfg)
	live.Close()
	if werr := consume.WriteTable(stdout, rep); werr != nil && err == nil {
		err = werr
	}
	if o.jsonPath != "" {
		if werr := writeJSONFile(o.jsonPath, rep); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// writeJSONFile writes rep to path as JSON (consume.WriteJSON).
func writeJSONFile(path string, rep consume.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	if err := consume.WriteJSON(f, rep); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
