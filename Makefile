# pelwarden's tasks. `make test` is the command CI runs (.ci/run) and the
# README gives; it installs what it needs first (chromium as root, through
# scripts/test-tools.sh; debootstrap and the server images through
# scripts/images.sh).

export TESTCONTAINERS_RYUK_DISABLED ?= true
export TESTCONTAINERS_HOST_OVERRIDE ?= 127.0.0.1
# Tests that need containers fail (rather than skip) when Docker is missing.
export PELWARDEN_REQUIRE_DOCKER ?= 1
# The dashboard's browser tests fail (rather than skip) without chromium.
export PELWARDEN_REQUIRE_BROWSER ?= 1

# pelwardentest's servers, where a package's tests use the kit's defaults.
export PELWARDEN_TEST_IMAGE ?= pelwarden/redis:8.0
export PELWARDEN_TEST_VALKEY_IMAGE ?= pelwarden/valkey:8.1

GO ?= go

# Builds without the checkout's directory in them, so Go's build cache is
# keyed by content alone: a fresh clone in another directory (every CI run)
# reuses what an earlier clone compiled and vetted, where each new path
# compiled and vetted the project's packages again.
export GOFLAGS ?= -trimpath

# The servers the driver's fake is checked against besides
# PELWARDEN_SERVER_IMAGE's (TestFakeAgreesWithServer and its ordered twin;
# `make unit`).
AGREE_IMAGES ?= pelwarden/redis:7.0 pelwarden/redis:8.6 pelwarden/valkey:8.1 pelwarden/valkey:9.1

## The repository's Go modules (go.work ties them for development): the
## core module (the library, the driver and the producer: go-redis and
## nothing heavy), one module per heavy dependency a user chooses
## (prommetrics, pelwardenotel, pelwardentest with its test servers), the CLI
## with its internals (cmd), and two never published: the integration tests
## and the benchmarks whose comparisons need heavy peers (benchmarks: the
## consume suite against watermill-redisstream, kept out of the CLI's build).
CORE_MODULE := .
MODULES := driver/prommetrics pelwardenotel pelwardentest pelwardenwatermill cmd benchmarks integration_test

.PHONY: alerts integration-tests watermill-tests watermill-stress watermill-matrix test tools release-check release tidy images lint deps unit integration chaos soak soak-model fuzz fuzz-lua bench bench-report bench-drain demo ui-scale ui-screenshots

## test: everything CI checks: formatting, vet of every module, the core
## module's dependency promise, unit tests with -race, the release check,
## and the integration matrix against real servers in containers. The
## Watermill module's tests (they mostly wait) run beside the steps before
## the integration tests (a third to a half of the two cores idle),
## their output printed once they end (scripts/beside.sh); the integration
## tests, bound by CPU, run alone after both.
test: tools images
	./scripts/beside.sh '$(MAKE) --no-print-directory watermill-tests' \
	  $(MAKE) --no-print-directory lint deps unit alerts release-check
	$(MAKE) --no-print-directory integration-tests

## tools: install what the tests need and the machine lacks (as root), or
## say what to install.
tools:
	./scripts/test-tools.sh

## alerts: the Prometheus alert rules (deploy/prometheus) checked and
## unit-tested with promtool.
alerts:
	cd deploy/prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml

## release-check: the modules as a user gets them: served from the checkout
## through a file-based module proxy, required at the release version by a
## module outside the repository, built, tested against a server, and the
## CLI installed with go install (internal/release).
release-check:
	./scripts/with-server.sh $(GO) run ./internal/release check

## release: prepare release VERSION: every sibling required at VERSION (and
## go.work's lines), go.sum tidied, the check run, the tags printed.
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(GO) run ./internal/release set-version $(VERSION)
	$(GO) run ./internal/release tidy
	./scripts/with-server.sh $(GO) run ./internal/release check
	$(GO) run ./internal/release tags

## tidy: go mod tidy in every module, siblings resolved from the checkout.
tidy:
	$(GO) run ./internal/release tidy

## demo: the README's first command: three consumers, one killed, poison
## orders and a slow handler on a throwaway server, then the invariant check.
## Builds the one image it needs first (skipped when it exists); with
## redis-server or valkey-server on PATH the demo uses that binary instead.
demo:
	./scripts/images.sh pelwarden/redis:8.0
	PELWARDEN_DEMO_IMAGE=pelwarden/redis:8.0 $(GO) run ./cmd/pelwarden demo

## images: build the Redis and Valkey images from Debian's packages (skips
## the ones that exist).
images:
	./scripts/images.sh

## lint: gofmt, and go vet of every module. Vet builds with -race, as the
## tests do: it checks the files the tests compile, and the packages it
## compiles for its type information are the tests' own (on a machine whose
## build cache is cold, vet without it compiled every dependency a second
## time).
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(CORE_MODULE) $(MODULES); do echo "go vet: $$m"; (cd $$m && $(GO) vet -race ./...) || exit 1; done

## deps: a user module importing only pelwarden and its driver lists no
## container, CLI, metrics, benchmark or tracing module.
deps:
	./scripts/check-core-deps.sh

## unit: every module but integration_test, with -race. The core module's
## own tests need no Docker (`go test ./...` there passes without it); its
## runnable examples run here against a throwaway server. pelwardentest's
## tests start containers (the images `images` builds). The driver's fake
## is checked against every server of AGREE_IMAGES too.
unit:
	./scripts/with-server.sh ./scripts/go-test.sh $(GO) test -race -count=1 ./...
	@for img in $(AGREE_IMAGES); do echo "the driver's fake against $$img"; \
	  PELWARDEN_SERVER_IMAGE=$$img ./scripts/with-server.sh $(GO) test -count=1 -run '^Test(Ordered)?FakeAgreesWithServer$$' ./driver/ || exit 1; done
	@for m in $(filter-out integration_test pelwardenwatermill,$(MODULES)); do echo "go test: $$m"; (cd $$m && $(CURDIR)/scripts/go-test.sh $(GO) test -race -count=1 -timeout 30m ./...) || exit 1; done

## integration (and unit): scripts/go-test.sh repeats a run's failures at
## its end, where a CI log's last screen shows them.
## integration: the integration matrix (integration-tests), then the
## Watermill adapter's tests (watermill-tests) in one run: its own tests
## on the matrix, beside watermill's stress test
## (the universal suite ten times at once) on Redis 8.0 and the universal
## suite once on the two other servers where it tests a path of its own
## (suite_test.go's suiteLabels; a plain run on 8.0 would repeat what the
## stress test checks there). The matrix is watermill-matrix and
## watermill-stress. The integration tests keep the two cores busy at
## -parallel 8; the Watermill module's tests mostly wait, so 24 of them run
## at once (326 s at 8, 35% busy; 196 s at 24, 64% busy).
integration: integration-tests watermill-tests

integration-tests:
	cd integration_test && $(CURDIR)/scripts/go-test.sh $(GO) test -race -count=1 -parallel 8 -timeout 20m ./...

watermill-tests:
	cd pelwardenwatermill && PELWARDEN_WATERMILL_STRESS=redis-8.0 \
	  $(CURDIR)/scripts/go-test.sh $(GO) test -race -count=1 -parallel 24 -timeout 30m ./...

## watermill-matrix: watermill's universal suite on every server of the
## matrix (about 2.5 minutes per server; make integration runs it on three).
watermill-matrix:
	./scripts/images.sh
	cd pelwardenwatermill && PELWARDEN_WATERMILL_SUITE_EVERYWHERE=1 \
	  $(GO) test -race -count=1 -parallel 8 -timeout 30m -run '^TestPubSub$$' ./...

## watermill-stress: watermill's stress test (its universal suite ten times
## at once per server) on the adapter over the whole matrix: about 4
## minutes per server with -parallel 8, 20 for the matrix, which does not
## fit CI's time beside the rest (make integration runs it on Redis 8.0);
## run it before a release (PELWARDEN_IMAGES narrows the matrix).
watermill-stress:
	./scripts/images.sh
	cd pelwardenwatermill && PELWARDEN_WATERMILL_STRESS=all $(GO) test -race -count=1 -parallel 8 -timeout 60m -run '^TestPubSubStressTest$$' ./...

## chaos: the chaos suite alone (integration_test/chaos_*): producers and
## consumer subprocesses under SIGKILL, toxiproxy toxics, FUNCTION FLUSH,
## server restarts and CLIENT KILL, each on its own then mixed, then the
## invariant check, on each of CHAOS_IMAGES at once (Redis 8.0: the
## reclaim passes; 8.6: the reads that claim). CI sizes; `make integration`
## runs it too.
CHAOS_IMAGES ?= pelwarden/redis:8.0 pelwarden/redis:8.6
comma := ,
chaos_list = $(subst $() ,$(comma),$(strip $(CHAOS_IMAGES)))
chaos:
	./scripts/images.sh $(CHAOS_IMAGES)
	PELWARDEN_IMAGES=$(chaos_list) PELWARDEN_CHAOS_IMAGE=$(chaos_list) \
	  $(GO) test -race -count=1 -v -timeout 20m -run '^TestChaos$$' ./integration_test

## soak: soak-model (below), then the mixed chaos scenario at length
## (RELIABILITY.md): SOAK_ENTRIES entries at SOAK_RATE a second,
## SOAK_CONSUMERS consumer processes, every fault. The report is appended to
## SOAK_REPORT (JSON lines).
SOAK_ENTRIES ?= 200000
SOAK_RATE ?= 1000
SOAK_CONSUMERS ?= 4
SOAK_REPORT ?= soak-report.jsonl
soak: soak-model
	./scripts/images.sh $(CHAOS_IMAGES)
	PELWARDEN_IMAGES=$(chaos_list) PELWARDEN_CHAOS_IMAGE=$(chaos_list) \
	  PELWARDEN_CHAOS_ENTRIES=$(SOAK_ENTRIES) PELWARDEN_CHAOS_RATE=$(SOAK_RATE) \
	  PELWARDEN_CHAOS_CONSUMERS=$(SOAK_CONSUMERS) PELWARDEN_CHAOS_REPORT=$(abspath $(SOAK_REPORT)) \
	  $(GO) test -race -count=1 -v -timeout 120m -run '^TestChaos$$/.*/^mixed$$' ./integration_test

## soak-model: the model test of the function library (TestLibraryModel)
## at length, part of `soak`: SOAK_MODEL_CHECKS random
## sequences (of SOAK_MODEL_STEPS steps on average) per server of the matrix
## and per mode (FCALL, EVALSHA), instead of the CI budget. A failure prints
## the seed and the shrunk sequence. The defaults take about half an hour
## on a 2-core machine (500 sequences of 100 steps ran in 65-81 s per server
## and mode, the ten runs in parallel).
SOAK_MODEL_CHECKS ?= 10000
SOAK_MODEL_STEPS ?= 100
soak-model:
	./scripts/images.sh
	PELWARDEN_MODEL_CHECKS=$(SOAK_MODEL_CHECKS) PELWARDEN_MODEL_STEPS=$(SOAK_MODEL_STEPS) \
	  $(GO) test -race -count=1 -v -timeout 180m -run '^TestLibraryModel$$' ./integration_test

## bench: the benchmarks of BENCHMARKS.md: BENCH_SUITE reclaim (default:
## `pelwarden bench`, pelwarden vs the textbook client-side loop vs a
## watermill-style loop vs the pipelined floor), consume (`go run
## ./benchmarks/cmd/consume`, the driver with its defaults vs a raw loop and
## watermill-redisstream; several minutes) or all (both, one after the
## other). BENCH_FLAGS adds flags to the one suite run (`pelwarden bench
## --help`, `go run ./benchmarks/cmd/consume -help`). One image:
## pelwarden/redis:8.0.
BENCH_SUITE ?= reclaim
BENCH_FLAGS ?=
bench:
	@case "$(BENCH_SUITE)" in \
	  reclaim|consume) ;; \
	  all) if [ -n "$(BENCH_FLAGS)" ]; then echo "bench: BENCH_FLAGS goes with one suite: BENCH_SUITE=reclaim or consume" >&2; exit 2; fi ;; \
	  *) echo "bench: BENCH_SUITE must be reclaim, consume or all, got '$(BENCH_SUITE)'" >&2; exit 2 ;; \
	esac
	./scripts/images.sh pelwarden/redis:8.0
	$(if $(filter reclaim all,$(BENCH_SUITE)),PELWARDEN_BENCH_IMAGE=pelwarden/redis:8.0 $(GO) run ./cmd/pelwarden bench $(BENCH_FLAGS))
	$(if $(filter consume all,$(BENCH_SUITE)),PELWARDEN_BENCH_IMAGE=pelwarden/redis:8.0 $(GO) run ./benchmarks/cmd/consume $(BENCH_FLAGS))

## bench-report: regenerates BENCHMARKS.md's headline table from one run
## of the code at hand: builds the images and the benchmark programs, runs
## every headline job BENCH_ROUNDS times (the jobs interleaved round by
## round), and writes the medians with their least and most, the targets,
## the commit, the date and each job's command between the table's markers,
## and every round's metrics to benchmarks/headline.json. On 2 cores the
## first round takes about 20 minutes (the 1,000,000-entry drain runs in it
## alone), each other about 14: run it on a machine doing nothing else.
## BENCH_REPORT_FLAGS adds flags (--jobs NAME runs jobs alone and only
## prints their figures; go run ./benchmarks/cmd/bench-report -help).
BENCH_ROUNDS ?= 3
BENCH_REPORT_FLAGS ?=
bench-report:
	./scripts/images.sh pelwarden/redis:7.0 pelwarden/redis:8.0 pelwarden/redis:8.6 pelwarden/valkey:8.1
	cd benchmarks && $(GO) run ./cmd/bench-report --rounds $(BENCH_ROUNDS) $(BENCH_REPORT_FLAGS)

## bench-drain: the memory check of RELIABILITY.md ("Resources"): the
## driver drains a PEL of 1,000,000 idle entries left by a dead consumer
## (beside the Claim+Ack loop on the same PEL) while the benchmark samples its
## heap every 50 ms; prints entries/s, peak and last heap, and the heap by
## tenths of the run (the reclaim part of the consume suite,
## benchmarks/cmd/consume). Not part of `test`: it takes a few minutes.
bench-drain:
	./scripts/images.sh pelwarden/redis:8.0
	PELWARDEN_BENCH_IMAGE=pelwarden/redis:8.0 $(GO) run ./benchmarks/cmd/consume --parts reclaim --rounds 1 --reclaim-entries 1000000

## fuzz: run each fuzz target for a while (FUZZTIME, default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .

## fuzz-lua: fuzz the Lua functions through raw FCALL on one real server
## (FUZZLUATIME, default 10m). Builds the one image it needs first.
FUZZLUATIME ?= 10m
fuzz-lua:
	./scripts/images.sh pelwarden/redis:8.0
	PELWARDEN_IMAGES=pelwarden/redis:8.0 $(GO) test -run '^$$' -fuzz '^FuzzLibrary$$' -fuzztime $(FUZZLUATIME) -parallel 1 ./integration_test

## ui-scale: the dashboard's scale check (BENCHMARKS.md, "Dashboard"):
## builds a 1,000,000-entry PEL and 100,000 dead letters and prints every
## page's server time (INFO commandstats); fails past 300 ms.
ui-scale:
	./scripts/images.sh pelwarden/redis:8.0
	cd cmd/internal/dashboard && PELWARDEN_UI_SCALE=1 $(GO) test -count=1 -v -run '^TestScale$$' -timeout 10m .

## ui-screenshots: regenerates docs/screenshots/*.png (the dashboard guide's) in
## headless chromium.
ui-screenshots:
	./scripts/images.sh pelwarden/redis:8.0
	cd cmd/internal/dashboard && PELWARDEN_UI_SCREENSHOTS=$(abspath docs/screenshots) $(GO) test -count=1 -v -run '^TestScreenshots$$' -timeout 5m .
