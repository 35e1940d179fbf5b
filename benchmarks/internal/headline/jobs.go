package headline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pelwarden/pelwarden/benchmarks/internal/consume"
)

// Binaries are the programs the jobs run, built once before the first
// round so that no round pays for a compile (Build).
type Binaries struct {
	// Root is the repository's root (where go.work is).
	Root string
	// Dir holds the built programs.
	Dir string
}

// builds are the programs Build makes: the file's name, the module's
// directory (relative to Root) and the go command's arguments there.
var builds = []struct {
	name, dir string
	args      []string
}{
	{"pelwarden", "cmd", []string{"build", "./pelwarden"}},
	{"consume", "benchmarks", []string{"build", "./cmd/consume"}},
	{"integration.test", "integration_test", []string{"test", "-c", "."}},
	{"watermill.test", "pelwardenwatermill", []string{"test", "-c", "."}},
	{"dashboard.test", "cmd/internal/dashboard", []string{"test", "-c", "."}},
}

// Build compiles the jobs' programs into b.Dir.
func (b Binaries) Build(ctx context.Context, log func(string)) error {
	for _, p := range builds {
		args := append([]string{p.args[0], "-o", b.path(p.name)}, p.args[1:]...)
		log(fmt.Sprintf("building %s (go %s in %s)", p.name, strings.Join(args, " "), p.dir))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(b.Root, p.dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", p.name, err, out)
		}
	}
	return nil
}

func (b Binaries) path(name string) string { return filepath.Join(b.Dir, name) }

// A Job is one benchmark command. Each round runs it once; its figures
// read the metrics it reported.
type Job struct {
	// Name identifies the job in the table's figures.
	Name string
	// Command reproduces one round by hand, from the repository's root.
	Command string
	// Images are the server images the job needs (scripts/images.sh).
	Images []string
	// MaxRounds caps the rounds of a job too long to repeat (0: every
	// round); the table shows each figure's number of rounds.
	MaxRounds int
	// run runs one round; log is the file for the command's output.
	run func(ctx context.Context, b Binaries, log *os.File) (Metrics, error)
}

// runCmd runs argv in dir with env added and returns its standard output;
// log gets the command line, its standard error, then its output.
func runCmd(ctx context.Context, dir string, env []string, log *os.File, argv ...string) ([]byte, error) {
	fmt.Fprintf(log, "$ (cd %s && %s %s)\n", dir, strings.Join(env, " "), strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = log
	err := cmd.Run()
	_, _ = log.Write(stdout.Bytes())
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w (its output: %s)", filepath.Base(argv[0]), err, log.Name())
	}
	return stdout.Bytes(), nil
}

// reclaimJob is `pelwarden bench` (the reclaim suite) on image.
func reclaimJob(name, image string) Job {
	return Job{
		Name:    name,
		Command: "PELWARDEN_BENCH_IMAGE=" + image + " go run ./cmd/pelwarden bench",
		Images:  []string{image},
		run: func(ctx context.Context, b Binaries, log *os.File) (Metrics, error) {
			out, err := runCmd(ctx, b.Root, []string{"PELWARDEN_BENCH_IMAGE=" + image}, log, b.path("pelwarden"), "bench", "--json")
			if err != nil {
				return nil, err
			}
			ms, _, err := fromReclaim(out)
			return ms, err
		},
	}
}

// consumeJob is the consume suite (benchmarks/cmd/consume) with flags, one
// round per run, on image.
func consumeJob(name, image string, maxRounds int, flags ...string) Job {
	return Job{
		Name:      name,
		Command:   "PELWARDEN_BENCH_IMAGE=" + image + " go run ./benchmarks/cmd/consume --rounds 1 " + strings.Join(flags, " "),
		Images:    []string{image},
		MaxRounds: maxRounds,
		run: func(ctx context.Context, b Binaries, log *os.File) (Metrics, error) {
			path := log.Name() + ".json"
			argv := append([]string{b.path("consume"), "--rounds", "1", "--json", path}, flags...)
			if _, err := runCmd(ctx, b.Root, []string{"PELWARDEN_BENCH_IMAGE=" + image}, log, argv...); err != nil {
				return nil, err
			}
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			rep, err := consume.ReadJSON(f)
			if err != nil {
				return nil, err
			}
			return fromConsume(rep)
		},
	}
}

// goBenchJob runs Go benchmarks matching bench in module dir's test binary
// (built by Build as binary), with benchtime, on image.
func goBenchJob(name, binary, dir, bench, benchtime, image string) Job {
	env := []string{"PELWARDEN_IMAGES=" + image, "PELWARDEN_OLD_IMAGE=none"}
	display := fmt.Sprintf("cd %s && %s go test -run '^$' -bench '%s' -benchtime %s -count 1 -timeout 30m .",
		dir, strings.Join(env, " "), bench, benchtime)
	return testBinaryJob(name, binary, dir, env, image, display,
		"-test.run", "^$", "-test.bench", bench, "-test.benchtime", benchtime, "-test.count", "1", "-test.timeout", "30m")
}

// testBinaryJob runs a test binary built by Build with args and env added,
// in dir, and reads the result lines in Go's benchmark format from its
// output; display is the go test command line it stands for.
func testBinaryJob(name, binary, dir string, env []string, image, display string, args ...string) Job {
	return Job{
		Name:    name,
		Command: display,
		Images:  []string{image},
		run: func(ctx context.Context, b Binaries, log *os.File) (Metrics, error) {
			out, err := runCmd(ctx, filepath.Join(b.Root, dir), env, log, append([]string{b.path(binary)}, args...)...)
			if err != nil {
				return nil, err
			}
			ms, err := parseGoBench(out)
			if err == nil && len(ms) == 0 {
				err = fmt.Errorf("no benchmark result in the output (%s)", log.Name())
			}
			return ms, err
		},
	}
}

// dashboardScaleJob is the dashboard's scale test (make ui-scale), which
// prints each page's server time in Go's benchmark format.
func dashboardScaleJob(name, image string) Job {
	env := []string{"PELWARDEN_UI_SCALE=1", "PELWARDEN_TEST_IMAGE=" + image}
	display := "cd cmd/internal/dashboard && " + strings.Join(env, " ") + " go test -count=1 -run '^TestScale$' -timeout 20m ."
	return testBinaryJob(name, "dashboard.test", "cmd/internal/dashboard", env, image, display,
		"-test.run", "^TestScale$", "-test.count", "1", "-test.timeout", "20m")
}

// integrationJob is goBenchJob on the integration tests.
func integrationJob(name, bench, benchtime, image string) Job {
	return goBenchJob(name, "integration.test", "integration_test", bench, benchtime, image)
}
