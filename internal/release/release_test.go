package main

import (
	"archive/zip"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writeRepo makes a git work tree in a temporary directory with the given
// files (path -> content) and returns its root.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("git", "init", "-q", root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	return root
}

// goodRepo is a small repository that follows the rules: a core module, a
// nested module requiring it at v0.1.0, the integration tests' module, and
// a go.work taking the release from the checkout.
func goodRepo() map[string]string {
	return map[string]string{
		"go.mod":                      "module github.com/pelwarden/pelwarden\n\ngo 1.26.0\n",
		"lib.go":                      "package pelwarden\n",
		"lua/lib.lua":                 "-- the library\n",
		"pelwardentest/go.mod":        "module github.com/pelwarden/pelwarden/pelwardentest\n\ngo 1.26.0\n\nrequire github.com/pelwarden/pelwarden v0.1.0\n",
		"pelwardentest/kit.go":        "package pelwardentest\n",
		"pelwardentest/testdata/x.go": "package x\n",
		"integration_test/go.mod":     "module github.com/pelwarden/pelwarden/integration_test\n\ngo 1.26.0\n\nrequire github.com/pelwarden/pelwarden/pelwardentest v0.1.0\n",
		"integration_test/a_test.go":  "package integration_test\n",
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./pelwardentest\n\t./integration_test\n)\n\nreplace (\n" +
			"\tgithub.com/pelwarden/pelwarden v0.1.0 => ./\n\tgithub.com/pelwarden/pelwarden/pelwardentest v0.1.0 => ./pelwardentest\n)\n",
	}
}

// serveRepo writes the file proxy of the repository at root, its modules
// at v0.1.0, into a directory of the test's, and returns the directory.
func serveRepo(t *testing.T, root string) string {
	t.Helper()
	r, err := open(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeProxy(root, dir, "v0.1.0", r.mods, r.files); err != nil {
		t.Fatal(err)
	}
	return dir
}

// release runs the command line in root and returns its exit code and
// output.
func release(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(append(args, "-root", root), &out, &out)
	return code, out.String()
}

func TestLintPasses(t *testing.T) {
	t.Parallel()
	code, out := release(t, writeRepo(t, goodRepo()), "lint")
	if code != 0 {
		t.Fatalf("lint: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "3 go.mod files: no replace directive, every sibling required at v0.1.0") {
		t.Fatalf("lint output:\n%s", out)
	}
}

// The check fails, naming the module and the file, on a placeholder
// version, a pseudo-version, a replace directive, a version that is not
// the release's, and a go.work without the release's replace lines; it
// fails before it starts anything.
func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		edit   func(files map[string]string)
		args   []string
		module string
		says   string
	}{
		{
			name: "placeholder version",
			edit: func(f map[string]string) {
				f["integration_test/go.mod"] = strings.Replace(f["integration_test/go.mod"], "v0.1.0", "v0.0.0-00010101000000-000000000000", 1)
			},
			module: "module github.com/pelwarden/pelwarden/integration_test (integration_test/go.mod)",
			says:   "requires github.com/pelwarden/pelwarden/pelwardentest at the placeholder version v0.0.0-00010101000000-000000000000, which no module proxy serves; require v0.1.0",
		},
		{
			name: "pseudo-version",
			edit: func(f map[string]string) {
				f["integration_test/go.mod"] = strings.Replace(f["integration_test/go.mod"], "v0.1.0", "v0.0.0-20261201120000-0123456789ab", 1)
			},
			module: "module github.com/pelwarden/pelwarden/integration_test (integration_test/go.mod)",
			says:   "at the pseudo-version v0.0.0-20261201120000-0123456789ab; require the release v0.1.0",
		},
		{
			name: "replace directive",
			edit: func(f map[string]string) {
				f["pelwardentest/go.mod"] += "\nreplace github.com/pelwarden/pelwarden => ../\n"
			},
			module: "module github.com/pelwarden/pelwarden/pelwardentest (pelwardentest/go.mod)",
			says:   "replace directive github.com/pelwarden/pelwarden => ../: the go command refuses to `go install` a module with replace directives",
		},
		{
			name: "another version",
			edit: func(f map[string]string) {
				f["integration_test/go.mod"] = strings.Replace(f["integration_test/go.mod"], "v0.1.0", "v0.0.9", 1)
			},
			args:   []string{"-version", "v0.1.0"},
			module: "module github.com/pelwarden/pelwarden/integration_test (integration_test/go.mod)",
			says:   "requires github.com/pelwarden/pelwarden/pelwardentest v0.0.9, not the release version v0.1.0",
		},
		{
			name: "requires the unpublished module",
			edit: func(f map[string]string) {
				f["pelwardentest/go.mod"] += "require github.com/pelwarden/pelwarden/integration_test v0.1.0\n"
			},
			module: "module github.com/pelwarden/pelwarden/pelwardentest (pelwardentest/go.mod)",
			says:   "requires github.com/pelwarden/pelwarden/integration_test, which is never published",
		},
		{
			name: "go.work behind",
			edit: func(f map[string]string) {
				f["go.work"] = strings.Replace(f["go.work"], "\tgithub.com/pelwarden/pelwarden/pelwardentest v0.1.0 => ./pelwardentest\n", "", 1)
			},
			module: "module github.com/pelwarden/pelwarden/pelwardentest (go.work)",
			says:   "no replace github.com/pelwarden/pelwarden/pelwardentest v0.1.0 => ./pelwardentest",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := goodRepo()
			tc.edit(files)
			code, out := release(t, writeRepo(t, files), append([]string{"check"}, tc.args...)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			if !strings.Contains(out, "release: "+tc.module+": ") || !strings.Contains(out, tc.says) {
				t.Fatalf("the output names neither %q nor %q:\n%s", tc.module, tc.says, out)
			}
			if !strings.Contains(out, errLint.Error()) {
				t.Fatalf("no summary line:\n%s", out)
			}
		})
	}
}

func TestReleaseVersionMustAgree(t *testing.T) {
	t.Parallel()
	files := goodRepo()
	files["integration_test/go.mod"] = strings.Replace(files["integration_test/go.mod"], "v0.1.0", "v0.2.0", 1)
	code, out := release(t, writeRepo(t, files), "lint")
	if code != 1 || !strings.Contains(out, "the modules require each other at different versions: v0.1.0 (by github.com/pelwarden/pelwarden/pelwardentest); v0.2.0 (by github.com/pelwarden/pelwarden/integration_test)") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// The proxy has the go command's layout, and each zip holds its module's
// files under path@version/, without nested modules.
func TestProxyLayout(t *testing.T) {
	t.Parallel()
	dir := serveRepo(t, writeRepo(t, goodRepo()))
	for _, f := range []string{"list", "v0.1.0.info", "v0.1.0.mod", "v0.1.0.zip"} {
		for _, m := range []string{"github.com/pelwarden/pelwarden", "github.com/pelwarden/pelwarden/pelwardentest"} {
			if _, err := os.Stat(filepath.Join(dir, m, "@v", f)); err != nil {
				t.Errorf("%s: %v", m, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "github.com/pelwarden/pelwarden/integration_test")); !os.IsNotExist(err) {
		t.Errorf("the unpublished module is served: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "github.com/pelwarden/pelwarden/@v/list")); string(got) != "v0.1.0\n" {
		t.Errorf("list: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "github.com/pelwarden/pelwarden/pelwardentest/@v/v0.1.0.mod")); !strings.Contains(string(got), "require github.com/pelwarden/pelwarden v0.1.0") {
		t.Errorf(".mod: %q", got)
	}
	for m, want := range map[string][]string{
		"github.com/pelwarden/pelwarden": {
			"github.com/pelwarden/pelwarden@v0.1.0/go.mod", "github.com/pelwarden/pelwarden@v0.1.0/go.work",
			"github.com/pelwarden/pelwarden@v0.1.0/lib.go", "github.com/pelwarden/pelwarden@v0.1.0/lua/lib.lua",
		},
		"github.com/pelwarden/pelwarden/pelwardentest": {
			"github.com/pelwarden/pelwarden/pelwardentest@v0.1.0/go.mod", "github.com/pelwarden/pelwarden/pelwardentest@v0.1.0/kit.go",
			"github.com/pelwarden/pelwarden/pelwardentest@v0.1.0/testdata/x.go",
		},
	} {
		zr, err := zip.OpenReader(filepath.Join(dir, m, "@v", "v0.1.0.zip"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range zr.File {
			got = append(got, f.Name)
		}
		_ = zr.Close()
		sort.Strings(got)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s zip:\n%s\nwant:\n%s", m, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// The benchmarks module (its comparisons need watermill-redisstream) is
// neither served by the proxy nor tagged, and its files stay out of the
// core module's zip.
func TestBenchmarksUnpublished(t *testing.T) {
	t.Parallel()
	files := goodRepo()
	files["benchmarks/go.mod"] = "module github.com/pelwarden/pelwarden/benchmarks\n\ngo 1.26.0\n\nrequire github.com/pelwarden/pelwarden v0.1.0\n"
	files["benchmarks/cmd/consume/main.go"] = "package main\n"
	root := writeRepo(t, files)
	dir := serveRepo(t, root)
	if _, err := os.Stat(filepath.Join(dir, "github.com/pelwarden/pelwarden/benchmarks")); !os.IsNotExist(err) {
		t.Errorf("the benchmarks module is served: %v", err)
	}
	zr, err := zip.OpenReader(filepath.Join(dir, "github.com/pelwarden/pelwarden/@v/v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if strings.Contains(f.Name, "/benchmarks/") {
			t.Errorf("the core module's zip holds %s", f.Name)
		}
	}
	code, out := release(t, root, "tags")
	if code != 0 || strings.Contains(out, "benchmarks/") {
		t.Errorf("tags: exit %d:\n%s", code, out)
	}
}

// The repository itself follows the rules.
func TestRepositoryLints(t *testing.T) {
	t.Parallel()
	code, out := release(t, "../..", "lint")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestEscapePath(t *testing.T) {
	t.Parallel()
	got, err := escapePath("github.com/ThreeDotsLabs/watermill")
	if err != nil || got != "github.com/!three!dots!labs/watermill" {
		t.Fatalf("%q, %v", got, err)
	}
}

// set-version moves every sibling requirement and go.work's replace lines
// to the new version, and the result lints clean at it.
func TestSetVersion(t *testing.T) {
	t.Parallel()
	root := writeRepo(t, goodRepo())
	code, out := release(t, root, "set-version", "v0.2.0")
	if code != 0 {
		t.Fatalf("set-version: exit %d:\n%s", code, out)
	}
	for _, f := range []string{"pelwardentest/go.mod", "integration_test/go.mod", "go.work"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "v0.1.0") || !strings.Contains(string(b), "v0.2.0") {
			t.Errorf("%s after set-version v0.2.0:\n%s", f, b)
		}
	}
	if code, out := release(t, root, "lint"); code != 0 || !strings.Contains(out, "every sibling required at v0.2.0") {
		t.Fatalf("lint after set-version: exit %d:\n%s", code, out)
	}
	if code, out := release(t, root, "set-version", "2.0"); code != 1 || !strings.Contains(out, `"2.0" is not a release version`) {
		t.Fatalf("set-version 2.0: exit %d:\n%s", code, out)
	}
}

func TestTags(t *testing.T) {
	t.Parallel()
	code, out := release(t, writeRepo(t, goodRepo()), "tags")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"  git tag v0.1.0\n", "  git tag pelwardentest/v0.1.0\n", "  git push origin v0.1.0 pelwardentest/v0.1.0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "integration_test/v0.1.0") {
		t.Errorf("the unpublished module is tagged:\n%s", out)
	}
}

// The check's module cache loses this project's modules (their trees,
// read-only as Go leaves them, and their downloads) and keeps the others.
func TestForgetProjectModules(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(cache, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Dir(p), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := []string{
		mk("github.com/pelwarden/pelwarden@v0.1.0/go.mod", 0o555),
		mk("github.com/pelwarden/pelwarden/driver/prommetrics@v0.1.0/go.mod", 0o555),
		mk("cache/download/github.com/pelwarden/pelwarden/@v/v0.1.0.zip", 0o755),
	}
	others := []string{
		mk("github.com/redis/go-redis/v9@v9.23.0/go.mod", 0o555),
		mk("cache/download/github.com/redis/go-redis/v9/@v/v9.23.0.zip", 0o755),
		mk("github.com/pelwarden-other/x@v1.0.0/go.mod", 0o555),
	}
	if err := forgetProjectModules(cache); err != nil {
		t.Fatal(err)
	}
	for _, p := range own {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", p, err)
		}
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := forgetProjectModules(filepath.Join(cache, "none")); err != nil {
		t.Errorf("a cache that does not exist yet: %v", err)
	}
}

// A package of the project that gains an import between two checks is
// built with it in the second, though the check's module cache keeps the
// same module path and version from run to run (Go's module index, which
// takes a module cache's directories as immutable, is off in goEnv).
func TestModuleCacheSeesChangedSource(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	imports := func(libGo string) string {
		t.Helper()
		files := goodRepo()
		files["lib.go"] = libGo
		proxyDir := serveRepo(t, writeRepo(t, files))
		if err := forgetProjectModules(cache); err != nil {
			t.Fatal(err)
		}
		env, err := goEnv(proxyDir, cache)
		if err != nil {
			t.Fatal(err)
		}
		user := t.TempDir()
		if err := os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/u\n\ngo 1.26.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runIn(user, env, "go", "get", projectPath+"@v0.1.0"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		out, err := runIn(user, env, "go", "list", "-f", "{{.Imports}}", projectPath)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	if got := imports("package pelwarden\n"); got != "[]" {
		t.Fatalf("first check: imports %s, want []", got)
	}
	if got := imports("package pelwarden\n\nimport _ \"sync/atomic\"\n"); got != "[sync/atomic]" {
		t.Errorf("second check, the package importing sync/atomic now: imports %s", got)
	}
}
