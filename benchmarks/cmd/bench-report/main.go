// Command bench-report regenerates the headline table of BENCHMARKS.md from
// one run of the code at hand: it builds the benchmark programs once, runs
// every headline job --rounds times, the jobs interleaved round by round,
// and writes the table between BENCHMARKS.md's bench-report markers (the
// medians, the least and most values, the targets, the commit, the date and
// each job's command), and every round's raw metrics to
// benchmarks/headline.json. `make bench-report` runs it after building the
// images the jobs need.
//
// With --jobs it runs only those jobs and prints their figures without
// touching BENCHMARKS.md: the table always comes from one whole run.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pelwarden/pelwarden/benchmarks/internal/headline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	rounds    int
	jobs      string
	list      bool
	doc, raw  string
	logDir    string
	skipBuild bool
	binDir    string
	rerender  bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("bench-report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./benchmarks/cmd/bench-report [flags]\n\n"+
			"Runs every headline benchmark of BENCHMARKS.md on the code at hand and\n"+
			"rewrites its headline table (make bench-report builds the images first).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&o.rounds, "rounds", 3, "runs of each job (a job may run fewer: see its Rounds column)")
	fs.StringVar(&o.jobs, "jobs", "", "comma-separated jobs to run alone; their figures are printed and BENCHMARKS.md is left as it is (--list names them)")
	fs.BoolVar(&o.list, "list", false, "list the jobs and figures, run nothing")
	fs.StringVar(&o.doc, "doc", "", "the document whose table is rewritten (default: BENCHMARKS.md at the repository's root)")
	fs.StringVar(&o.raw, "raw", "", "where every round's metrics are written as JSON (default: benchmarks/headline.json)")
	fs.StringVar(&o.logDir, "logs", "", "directory for each run's output (default: a new temporary directory)")
	fs.BoolVar(&o.skipBuild, "no-build", false, "use the programs already in --bin")
	fs.StringVar(&o.binDir, "bin", "", "directory for the built programs (default: in --logs)")
	fs.BoolVar(&o.rerender, "rerender", false, "run nothing: rewrite the table from the metrics in --raw (after a change to how figures are computed or named; the values still come from that one run)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "bench-report: unexpected argument %q (flags only)\n", fs.Arg(0))
		return 2
	}
	if err := report(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "bench-report: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func report(ctx context.Context, o options, stdout, stderr io.Writer) error {
	if o.rounds < 1 || o.rounds > 20 {
		return usageError{fmt.Errorf("--rounds must be between 1 and 20, got %d", o.rounds)}
	}
	all, figs := headline.Jobs(), headline.Figures()
	if err := headline.CheckFigures(figs, all); err != nil {
		return err
	}
	if o.list {
		for _, j := range all {
			fmt.Fprintf(stdout, "%-16s %s\n", j.Name, j.Command)
		}
		for _, f := range figs {
			fmt.Fprintf(stdout, "row %2d  %-16s %s\n", f.Row, f.Job, f.What)
		}
		return nil
	}
	jobs, partial, err := pick(all, o.jobs)
	if err != nil {
		return usageError{err}
	}
	if o.rerender && partial {
		return usageError{errors.New("--rerender rewrites the whole table: it takes no --jobs")}
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if o.doc == "" {
		o.doc = filepath.Join(root, "BENCHMARKS.md")
	}
	if o.raw == "" {
		o.raw = filepath.Join(root, "benchmarks", "headline.json")
	}
	doc, err := os.ReadFile(o.doc)
	if err != nil {
		return err
	}
	if _, err := headline.Splice(doc, nil); err != nil && !partial {
		return fmt.Errorf("%s: %w", o.doc, err)
	}
	if o.rerender {
		return rerender(o, all, figs, doc)
	}
	if o.logDir == "" {
		if o.logDir, err = os.MkdirTemp("", "bench-report-"); err != nil {
			return err
		}
	}
	if o.binDir == "" {
		o.binDir = filepath.Join(o.logDir, "bin")
	}
	for _, dir := range []string{o.logDir, o.binDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	logf("output of every run in %s", o.logDir)
	bins := headline.Binaries{Root: root, Dir: o.binDir}
	if !o.skipBuild {
		if err := bins.Build(ctx, func(s string) { logf("%s", s) }); err != nil {
			return err
		}
	}
	commit := gitDescribe(root)
	started := time.Now()
	runs, err := headline.Run(ctx, headline.Config{Binaries: bins, Rounds: o.rounds, Jobs: jobs, LogDir: o.logDir, Logf: logf})
	if err != nil {
		return err
	}
	h := headline.Header{Commit: commit, Started: started, Ended: time.Now(), Rounds: o.rounds, Machine: machine()}
	var used []headline.Figure
	for _, f := range figs {
		for _, j := range jobs {
			if f.Job == j.Name {
				used = append(used, f)
			}
		}
	}
	vals := headline.Evaluate(used, runs)
	var table bytes.Buffer
	if err := headline.WriteTable(&table, h, vals, jobs, runs); err != nil {
		return err
	}
	if partial {
		_, err := stdout.Write(table.Bytes())
		return err
	}
	// Read again: the document may have been edited during the run.
	if doc, err = os.ReadFile(o.doc); err != nil {
		return err
	}
	out, err := headline.Splice(doc, table.Bytes())
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.doc, out, 0o644); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(struct {
		Header headline.Header     `json:"header"`
		Runs   []headline.JobRound `json:"runs"`
	}{h, runs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.raw, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	logf("wrote the table to %s and the raw metrics to %s", o.doc, o.raw)
	var failed []string
	for _, r := range runs {
		if r.Err != "" {
			failed = append(failed, fmt.Sprintf("%s round %d", r.Job, r.Round))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d run(s) failed (%s); their figures say so in the table", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// rawReport is what --raw holds: the run's header and every round.
type rawReport struct {
	Header headline.Header     `json:"header"`
	Runs   []headline.JobRound `json:"runs"`
}

// rerender rewrites the table in doc from the metrics saved in o.raw.
func rerender(o options, jobs []headline.Job, figs []headline.Figure, doc []byte) error {
	b, err := os.ReadFile(o.raw)
	if err != nil {
		return err
	}
	var raw rawReport
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("%s: %w", o.raw, err)
	}
	var table bytes.Buffer
	if err := headline.WriteTable(&table, raw.Header, headline.Evaluate(figs, raw.Runs), jobs, raw.Runs); err != nil {
		return err
	}
	out, err := headline.Splice(doc, table.Bytes())
	if err != nil {
		return err
	}
	return os.WriteFile(o.doc, out, 0o644)
}

// pick returns the jobs named in list (all of them when empty).
func pick(all []headline.Job, list string) ([]headline.Job, bool, error) {
	if strings.TrimSpace(list) == "" {
		return all, false, nil
	}
	var out []headline.Job
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, j := range all {
			if j.Name == name {
				out, found = append(out, j), true
			}
		}
		if !found {
			return nil, false, fmt.Errorf("--jobs: no job %q (--list names them)", name)
		}
	}
	return out, true, nil
}

// repoRoot is the directory holding go.work, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work in the working directory or above: run from pelwarden's repository")
		}
		dir = parent
	}
}

// gitDescribe names the code measured; "-dirty" when the tree has changes.
func gitDescribe(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return "an unknown commit (git describe: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// machine describes the host: CPU model, cores, Go.
func machine() string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s", model, runtime.NumCPU(), runtime.Version())
}
