// Command release prepares and checks a release of pelwarden's modules.
// Run it from anywhere in the repository:
//
//	go run ./internal/release check        the release check (make test runs it)
//	go run ./internal/release lint         only the go.mod rules
//	go run ./internal/release set-version V  require every sibling at V, then lint
//	go run ./internal/release tidy         go mod tidy every module through the checkout's proxy
//	go run ./internal/release tags         the tags to push for the release
//
// The rules: no go.mod carries a replace directive (development goes
// through go.work alone) and every requirement of a sibling module names
// the release version, never a placeholder or pseudo-version. The check
// then builds, as a user would, from a file-based module proxy served from
// the checkout: a throwaway module outside the repository requires every
// published library module at the release version, builds and runs a
// program that uses the driver, the producer, prommetrics and
// pelwardenotel, runs a pelwardentest handler test, and `go install`s the
// CLI at the release version and runs it. It needs a server:
// PELWARDEN_TEST_REDIS_URL (scripts/with-server.sh sets it).
//
// The go.sum files list no sibling module: inside the repository go.work
// resolves them, and a module's own go.sum plays no part when a user
// requires it.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = "usage: release check|lint|tidy|tags [-version V] [-root DIR] | release set-version V [-root DIR]"

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "the release version (default: the version the modules require each other at)")
	root := fs.String("root", "", "the repository (default: the git work tree holding the current directory)")
	if cmd == "set-version" {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprintln(stderr, usage)
			return 2
		}
		*version, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	r, err := open(*root)
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	switch cmd {
	case "set-version":
		err = r.setVersion(*version, stdout)
	case "lint", "check", "tags", "tidy":
		if *version == "" {
			*version, err = releaseVersion(r.mods)
			if err != nil {
				break
			}
		}
		err = r.lint(*version, stdout)
		if err != nil || cmd == "lint" {
			break
		}
		switch cmd {
		case "check":
			err = r.check(*version, stdout)
		case "tags":
			r.printTags(*version, stdout)
		case "tidy":
			err = r.tidy(*version, stdout)
		}
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	return 0
}

// repo is the repository as the release sees it.
type repo struct {
	root  string
	files []string
	mods  []module
}

func open(root string) (*repo, error) {
	if root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return nil, fmt.Errorf("not in a git work tree (give -root): %w", err)
		}
		root = strings.TrimSpace(string(out))
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	list, err := files(root)
	if err != nil {
		return nil, err
	}
	mods, err := discover(root, list)
	if err != nil {
		return nil, err
	}
	return &repo{root: root, files: list, mods: mods}, nil
}

// errLint is returned when a go.mod breaks a rule; the problems are printed.
var errLint = errors.New("the go.mod files break the release rules (above)")

func (r *repo) lint(version string, w io.Writer) error {
	problems := append(lint(r.mods, version), r.workProblems(version)...)
	for _, p := range problems {
		fmt.Fprintln(w, "release: "+p.String())
	}
	if len(problems) > 0 {
		return errLint
	}
	fmt.Fprintf(w, "release: %d go.mod files: no replace directive, every sibling required at %s\n", len(r.mods), version)
	return nil
}

// setVersion requires every sibling at version in every go.mod.
func (r *repo) setVersion(version string, w io.Writer) error {
	if !isRelease(version) {
		return fmt.Errorf("%q is not a release version (vMAJOR.MINOR.PATCH, major 0 or 1)", version)
	}
	for _, m := range r.mods {
		var edits []string
		for _, req := range m.Mod.Require {
			if (req.Path == projectPath || strings.HasPrefix(req.Path, projectPath+"/")) && req.Version != version {
				edits = append(edits, "-require="+req.Path+"@"+version)
			}
		}
		if len(edits) == 0 {
			continue
		}
		file := filepath.Join(r.root, filepath.FromSlash(m.Dir), "go.mod")
		if _, err := runIn(r.root, nil, "go", append(append([]string{"mod", "edit"}, edits...), file)...); err != nil {
			return err
		}
		fmt.Fprintf(w, "release: %s: %d requirements set to %s\n", m.Dir, len(edits), version)
	}
	if err := r.setWorkVersion(version); err != nil {
		return err
	}
	again, err := open(r.root)
	if err != nil {
		return err
	}
	return again.lint(version, w)
}

// goWork is the part of `go work edit -json` the release reads.
type goWork struct {
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

func (r *repo) readWork() (*goWork, string, error) {
	file := filepath.Join(r.root, "go.work")
	if _, err := os.Stat(file); err != nil {
		return nil, file, err
	}
	out, err := runIn(r.root, nil, "go", "work", "edit", "-json", file)
	if err != nil {
		return nil, file, err
	}
	var w goWork
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		return nil, file, fmt.Errorf("go work edit -json: %w", err)
	}
	return &w, file, nil
}

// setWorkVersion points go.work's replace lines at version: the release
// being prepared is on no proxy yet, so the workspace takes each published
// module at that version from the checkout.
func (r *repo) setWorkVersion(version string) error {
	w, file, err := r.readWork()
	if err != nil {
		return err
	}
	var edits []string
	for _, rep := range w.Replace {
		if rep.Old.Path == projectPath || strings.HasPrefix(rep.Old.Path, projectPath+"/") {
			edits = append(edits, "-dropreplace="+rep.Old.Path+"@"+rep.Old.Version)
		}
	}
	for _, m := range r.mods {
		if m.Published {
			dir := "./" + m.Dir
			if m.Dir == "." {
				dir = "./"
			}
			edits = append(edits, "-replace="+m.Path+"@"+version+"="+dir)
		}
	}
	_, err = runIn(r.root, nil, "go", append(append([]string{"work", "edit"}, edits...), file)...)
	return err
}

// workProblems checks that go.work takes every published module at version
// from the checkout (else a build in the workspace asks a proxy for it).
func (r *repo) workProblems(version string) []problem {
	w, file, err := r.readWork()
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return []problem{{Module: projectPath, File: "go.work", Text: err.Error()}}
	}
	have := map[string]string{}
	for _, rep := range w.Replace {
		have[rep.Old.Path+"@"+rep.Old.Version] = rep.New.Path
	}
	var out []problem
	for _, m := range r.mods {
		if !m.Published {
			continue
		}
		if _, ok := have[m.Path+"@"+version]; !ok {
			out = append(out, problem{Module: m.Path, File: filepath.Base(file),
				Text: fmt.Sprintf("no replace %s %s => ./%s: the workspace would ask a proxy for the unreleased version (run go run ./internal/release set-version %s)", m.Path, version, m.Dir, version)})
		}
	}
	return out
}

func (r *repo) printTags(version string, w io.Writer) {
	var tags []string
	for _, m := range r.mods {
		if m.Published {
			tags = append(tags, m.tag(version))
		}
	}
	fmt.Fprintln(w, "release: tag the release commit and push the tags, one per published module:")
	for _, t := range tags {
		fmt.Fprintf(w, "  git tag %s\n", t)
	}
	fmt.Fprintf(w, "  git push origin %s\n", strings.Join(tags, " "))
}

// runIn runs a command in dir with env added to the process's and returns
// its combined output; a failure carries the command line and the output.
func runIn(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return buf.String(), fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, strings.TrimSpace(buf.String()))
	}
	return buf.String(), nil
}
