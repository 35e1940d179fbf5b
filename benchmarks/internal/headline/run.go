package headline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Config configures Run.
type Config struct {
	// Binaries: where the repository is and the built programs are.
	Binaries Binaries
	// Rounds each job runs (at most its MaxRounds), interleaved: round 1
	// of every job, then round 2, each round starting one job further on.
	Rounds int
	// Jobs to run (all of Jobs when empty).
	Jobs []Job
	// LogDir receives each run's output.
	LogDir string
	// Logf receives progress.
	Logf func(format string, args ...any)
}

// JobRound is one run of a job.
type JobRound struct {
	Job     string        `json:"job"`
	Round   int           `json:"round"`
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
	Metrics Metrics       `json:"metrics,omitempty"`
	Err     string        `json:"error,omitempty"`
}

// Run runs every job's rounds, interleaved, and returns every run in run
// order. A job that fails in a round is recorded with its error and the
// others go on; only a cancelled ctx stops the run.
func Run(ctx context.Context, cfg Config) ([]JobRound, error) {
	jobs := cfg.Jobs
	if len(jobs) == 0 {
		jobs = Jobs()
	}
	var runs []JobRound
	for round := 1; round <= cfg.Rounds; round++ {
		order := rotate(jobs, round-1)
		for _, j := range order {
			if j.MaxRounds > 0 && round > j.MaxRounds {
				continue
			}
			if err := ctx.Err(); err != nil {
				return runs, err
			}
			jr := runOne(ctx, cfg, j, round)
			if ctx.Err() != nil {
				return runs, ctx.Err()
			}
			runs = append(runs, jr)
		}
	}
	return runs, nil
}

// rotate returns jobs starting at index k (mod len): each round starts
// with another job, so no job always runs on a machine just warmed or
// just loaded by the same neighbour.
func rotate(jobs []Job, k int) []Job {
	if len(jobs) == 0 {
		return nil
	}
	k %= len(jobs)
	return append(slices.Clone(jobs[k:]), jobs[:k]...)
}

func runOne(ctx context.Context, cfg Config, j Job, round int) JobRound {
	jr := JobRound{Job: j.Name, Round: round, Started: time.Now()}
	cfg.Logf("round %d: %s", round, j.Name)
	log, err := os.Create(filepath.Join(cfg.LogDir, fmt.Sprintf("%s-round%d.log", j.Name, round)))
	if err != nil {
		jr.Err = err.Error()
		cfg.Logf("round %d: %s not run: %v", round, j.Name, err)
		return jr
	}
	defer log.Close()
	jctx, cancel := context.WithTimeout(ctx, 40*time.Minute)
	defer cancel()
	ms, err := j.run(jctx, cfg.Binaries, log)
	jr.Took = time.Since(jr.Started)
	jr.Metrics = ms
	if err != nil {
		jr.Err = err.Error()
		cfg.Logf("round %d: %s failed after %v: %v", round, j.Name, jr.Took.Round(time.Second), err)
	} else {
		cfg.Logf("round %d: %s took %v", round, j.Name, jr.Took.Round(time.Second))
	}
	return jr
}

// Value is one figure over the rounds.
type Value struct {
	Figure Figure
	// Values holds the figure's value in each round where its job ran
	// and reported it, in round order.
	Values []float64
	// Errs holds why it is missing in the other rounds.
	Errs []string
}

// Median, Least and Most of Values (0 without values).
func (v Value) Median() float64 {
	s := slices.Clone(v.Values)
	slices.Sort(s)
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Least is the smallest of Values.
func (v Value) Least() float64 {
	if len(v.Values) == 0 {
		return 0
	}
	return slices.Min(v.Values)
}

// Most is the largest of Values.
func (v Value) Most() float64 {
	if len(v.Values) == 0 {
		return 0
	}
	return slices.Max(v.Values)
}

// Evaluate computes every figure from the runs.
func Evaluate(figs []Figure, runs []JobRound) []Value {
	out := make([]Value, 0, len(figs))
	for _, f := range figs {
		v := Value{Figure: f}
		ran := false
		for _, r := range runs {
			if r.Job != f.Job {
				continue
			}
			ran = true
			if r.Err != "" {
				v.Errs = append(v.Errs, fmt.Sprintf("round %d: %s", r.Round, r.Err))
				continue
			}
			x, err := f.value(r.Metrics)
			if err != nil {
				v.Errs = append(v.Errs, fmt.Sprintf("round %d: %v", r.Round, err))
				continue
			}
			v.Values = append(v.Values, x)
		}
		if !ran {
			v.Errs = append(v.Errs, "its job did not run")
		}
		out = append(out, v)
	}
	return out
}

// CheckFigures reports figures whose job is not in jobs (a mistake in the
// tables of this package).
func CheckFigures(figs []Figure, jobs []Job) error {
	names := map[string]bool{}
	for _, j := range jobs {
		names[j.Name] = true
	}
	var errs []error
	for _, f := range figs {
		if !names[f.Job] {
			errs = append(errs, fmt.Errorf("row %d %q: no job %q", f.Row, f.What, f.Job))
		}
	}
	return errors.Join(errs...)
}
