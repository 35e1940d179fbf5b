package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// projectPath is the path of the core module; every module of the
// repository has a path under it.
const projectPath = "github.com/pelwarden/pelwarden"

// unpublished lists the modules that are never required by a user and so
// never tagged (by directory): the integration tests, and the benchmarks
// whose comparisons need heavy peers (watermill-redisstream) that the CLI
// must not build.
var unpublished = map[string]bool{"integration_test": true, "benchmarks": true}

// module is one go.mod of the repository.
type module struct {
	Dir       string // relative to the repository root, "." for the core
	Path      string
	Published bool
	Mod       goMod
	ModFile   []byte // go.mod as written
}

// goMod is the part of `go mod edit -json` the check reads.
type goMod struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

// tag is the git tag of the module's release v: "v0.1.0" for the core,
// "driver/prommetrics/v0.1.0" for a nested module.
func (m module) tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// files lists the repository's files as git sees them: tracked, and
// untracked but not ignored (so a change not yet committed is checked
// too), relative to root, sorted. Deleted files are left out.
func files(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	var list []string
	seen := map[string]bool{}
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a regular file
		}
		list = append(list, f)
	}
	sort.Strings(list)
	return list, nil
}

// discover finds the repository's modules and reads their go.mod files.
func discover(root string, list []string) ([]module, error) {
	var mods []module
	for _, f := range list {
		if path.Base(f) != "go.mod" {
			continue
		}
		dir := path.Dir(f)
		if strings.Contains("/"+dir+"/", "/testdata/") {
			continue // not a module of the repository
		}
		file := filepath.Join(root, filepath.FromSlash(f))
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("go", "mod", "edit", "-json", file)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s", f, err, strings.TrimSpace(stderr.String()))
		}
		m := module{Dir: dir, ModFile: data, Published: !unpublished[dir]}
		if err := json.Unmarshal(out, &m.Mod); err != nil {
			return nil, fmt.Errorf("%s: go mod edit -json: %w", f, err)
		}
		m.Path = m.Mod.Module.Path
		mods = append(mods, m)
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("no go.mod under %s", root)
	}
	return mods, nil
}

// semver is a release version: vMAJOR.MINOR.PATCH with an optional
// pre-release; major 0 or 1 (a v2 would need /v2 module paths).
var semver = regexp.MustCompile(`^v[01]\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// isRelease reports whether v is a release version (not a pseudo-version).
func isRelease(v string) bool { return semver.MatchString(v) && !pseudo.MatchString(v) }

// pseudo matches a pseudo-version (v0.0.0-00010101000000-000000000000 is
// the placeholder `go mod edit -require` writes).
var pseudo = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+-(0\.|.*\.)?[0-9]{14}-[0-9a-f]{12}$`)

// placeholder is the version `go mod edit -require` writes for a module
// with no version, which no proxy serves.
const placeholder = "v0.0.0-00010101000000-000000000000"

// problem is one rule a go.mod breaks; its text names the module and the
// file.
type problem struct {
	Module, File, Text string
}

func (p problem) String() string {
	return fmt.Sprintf("module %s (%s): %s", p.Module, p.File, p.Text)
}

// lint checks the rules that make the modules installable from a proxy:
// no replace directive anywhere, and every requirement of a sibling at
// exactly version (which must be a release version).
func lint(mods []module, version string) []problem {
	var out []problem
	if !isRelease(version) {
		return []problem{{Module: projectPath, File: "-", Text: fmt.Sprintf("%q is not a release version (vMAJOR.MINOR.PATCH, major 0 or 1)", version)}}
	}
	byPath := map[string]module{}
	for _, m := range mods {
		byPath[m.Path] = m
	}
	for _, m := range mods {
		file := path.Join(m.Dir, "go.mod")
		add := func(format string, args ...any) {
			out = append(out, problem{Module: m.Path, File: file, Text: fmt.Sprintf(format, args...)})
		}
		if m.Path != projectPath && !strings.HasPrefix(m.Path, projectPath+"/") {
			add("module path is not under %s", projectPath)
		}
		for _, r := range m.Mod.Replace {
			add("replace directive %s => %s: the go command refuses to `go install` a module with replace directives and a user's build ignores them; develop through go.work instead",
				strings.TrimSpace(r.Old.Path+" "+r.Old.Version), strings.TrimSpace(r.New.Path+" "+r.New.Version))
		}
		for _, r := range m.Mod.Require {
			if r.Path != projectPath && !strings.HasPrefix(r.Path, projectPath+"/") {
				continue
			}
			dep, ok := byPath[r.Path]
			switch {
			case !ok:
				add("requires %s, which is no module of this repository", r.Path)
			case !dep.Published:
				add("requires %s, which is never published", r.Path)
			case r.Version == placeholder:
				add("requires %s at the placeholder version %s, which no module proxy serves; require %s", r.Path, r.Version, version)
			case pseudo.MatchString(r.Version):
				add("requires %s at the pseudo-version %s; require the release %s", r.Path, r.Version, version)
			case r.Version != version:
				add("requires %s %s, not the release version %s", r.Path, r.Version, version)
			}
		}
	}
	return out
}

// releaseVersion is the release version the modules require each other
// at: the release being prepared. They must agree; requirements at other
// versions (placeholders, pseudo-versions) are left to lint.
func releaseVersion(mods []module) (string, error) {
	seen := map[string][]string{}
	for _, m := range mods {
		for _, r := range m.Mod.Require {
			if (r.Path == projectPath || strings.HasPrefix(r.Path, projectPath+"/")) && isRelease(r.Version) {
				seen[r.Version] = append(seen[r.Version], m.Path) // lint names the others
			}
		}
	}
	switch len(seen) {
	case 0:
		return "", fmt.Errorf("no module requires another at a release version: give the version with -version")
	case 1:
		for v := range seen {
			return v, nil
		}
	}
	var parts []string
	for v, ms := range seen {
		parts = append(parts, fmt.Sprintf("%s (by %s)", v, strings.Join(ms, ", ")))
	}
	sort.Strings(parts)
	return "", fmt.Errorf("the modules require each other at different versions: %s; run `make release VERSION=...`", strings.Join(parts, "; "))
}
