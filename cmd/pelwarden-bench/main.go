// Command pelwarden-bench compares ways of reclaiming the pending entries
// list of a dead consumer: pelwarden's claim path, the textbook client-side
// loop, a watermill-style loop and the pipelined floor, on loopback and
// through a proxy adding latency. With --suite consume (or all) it also
// measures the driver's main path against watermill-redisstream and a raw
// go-redis loop, its reclaim path against the claim function's page loop
// and the textbook loop, two consumers with slow handlers, large entries
// against the server's slow log, and its memory as the PEL grows. See
// BENCHMARKS.md and packages internal/reclaimbench and internal/consumebench.
//
// Without --redis it starts a throwaway server container from the image
// $PELWARDEN_BENCH_IMAGE (default pelwarden/redis:8.0, built by
// scripts/images.sh) and removes it at the end:
//
//	TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
//	  go run ./cmd/pelwarden-bench
//
// With --redis redis://host:port it uses that server; it creates keys under
// "{pwbench-..." and deletes them afterwards.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/consumebench"
	"github.com/pelwarden/pelwarden/internal/reclaimbench"
	"github.com/pelwarden/pelwarden/internal/redact"
	"github.com/pelwarden/pelwarden/internal/testserver"
)

// defaultImage is the server image used without --redis.
const defaultImage = "pelwarden/redis:8.0"

func main() {
	os.Exit(run())
}

func run() int {
	var (
		redisURL       = flag.String("redis", "", "server URL (redis://host:port/0); empty starts a container from $PELWARDEN_BENCH_IMAGE (default "+defaultImage+")")
		entries        = flag.Int("entries", reclaimbench.DefaultEntries, "PEL size per method on loopback")
		proxiedEntries = flag.Int("proxied-entries", reclaimbench.DefaultProxiedEntries, "PEL size per method through the latency proxy")
		methods        = flag.String("methods", "all", "comma-separated methods: pelwarden, textbook, watermill, pipelined")
		links          = flag.String("links", "all", "comma-separated links: loopback, proxied")
		latency        = flag.Duration("latency", reclaimbench.DefaultRoundTripLatency, "round-trip latency the proxy adds")
		pageSize       = flag.Int("page-size", reclaimbench.DefaultPageSize, "page size of pelwarden and the pipelined loop")
		suite          = flag.String("suite", "reclaim", "benchmarks to run: reclaim, consume or all")
		consumeEntries = flag.Int("consume-entries", consumebench.DefaultEntries, "consume suite: stream size per method of the main path")
		consumeParts   = flag.String("consume-parts", "all", "consume suite: comma-separated parts: main, reclaim, pel, ack, slow, large")
		consumeDrivers = flag.String("consume-drivers", consumebench.DefaultDriversSpec, "consume suite: driver configurations of the main path, comma-separated, each \"default\" (every field at its default) or options joined by /: c=N, p=N, r=N, plain or fenced (Concurrency, Prefetch, ReadCount, AckMode; an option left out keeps the default)")
		consumeRounds  = flag.Int("consume-rounds", 5, "consume suite: run the methods of the main and reclaim parts this many times, interleaved, and report the median of each (watermill runs once); the slow part runs this many times")
		watermill      = flag.Bool("consume-watermill", true, "consume suite: include watermill-redisstream in the main path (over a minute)")
		reclaimEntries = flag.Int("consume-reclaim-entries", consumebench.DefaultReclaimEntries, "consume suite: PEL size of the reclaim part (make bench-drain: 1000000)")
		profileDir     = flag.String("consume-profile-dir", "", "consume suite: write a CPU profile of each driver run of the main path to this directory")
	)
	flag.Parse()
	logger := log.New(os.Stderr, "pelwarden-bench: ", log.Ltime)

	if *suite != "reclaim" && *suite != "consume" && *suite != "all" {
		logger.Printf("--suite: unknown suite %q (want reclaim, consume or all)", *suite)
		return 2
	}
	parts, err := consumebench.ParseParts(*consumeParts)
	if err != nil {
		logger.Print(err)
		return 2
	}
	drivers, err := consumebench.ParseDrivers(*consumeDrivers)
	if err != nil {
		logger.Print(err)
		return 2
	}
	ms, err := reclaimbench.ParseMethods(*methods)
	if err != nil {
		logger.Print(err)
		return 2
	}
	ls, err := reclaimbench.ParseLinks(*links)
	if err != nil {
		logger.Print(err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := reclaimbench.Config{
		Entries:          *entries,
		ProxiedEntries:   *proxiedEntries,
		Methods:          ms,
		Links:            ls,
		RoundTripLatency: *latency,
		PageSize:         *pageSize,
		Logf:             logger.Printf,
	}
	if *redisURL != "" {
		opts, err := redis.ParseURL(*redisURL)
		if err != nil {
			logger.Printf("--redis: %v", err)
			return 2
		}
		cfg.Options = opts
		cfg.ServerLabel = redact.URL(*redisURL)
	} else {
		image := os.Getenv("PELWARDEN_BENCH_IMAGE")
		if image == "" {
			image = defaultImage
		}
		logger.Printf("starting %s", image)
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		srv, err := testserver.Start(startCtx, image, testserver.Options{})
		cancel()
		if err != nil {
			logger.Print(err)
			return 1
		}
		defer func() {
			if err := srv.Close(); err != nil {
				logger.Print(err)
			}
		}()
		cfg.Options = srv.Options()
		cfg.ServerLabel = image
	}

	if *suite != "consume" {
		rep, err := reclaimbench.Run(ctx, cfg)
		if werr := reclaimbench.WriteTable(os.Stdout, rep); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			fmt.Fprintln(os.Stderr)
			logger.Print(err)
			return 1
		}
	}
	if *suite == "reclaim" {
		return 0
	}
	if *suite == "all" {
		fmt.Println()
	}
	rep, err := consumebench.Run(ctx, consumebench.Config{Options: cfg.Options, Parts: parts, Drivers: drivers, Rounds: *consumeRounds,
		Entries: *consumeEntries, SkipWatermill: !*watermill, ReclaimEntries: *reclaimEntries, ProfileDir: *profileDir,
		ServerLabel: cfg.ServerLabel, Logf: logger.Printf})
	if werr := consumebench.WriteTable(os.Stdout, rep); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr)
		logger.Print(err)
		return 1
	}
	return 0
}
