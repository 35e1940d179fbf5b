package main

import (
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// userModule is the throwaway user module: a program and a handler test.
//
//go:embed testdata/user/*.go
var userModule embed.FS

// commands are the published modules a user installs rather than requires.
var commands = map[string]bool{"cmd": true}

// cliPackage is the CLI's package, installed with go install.
const cliPackage = projectPath + "/cmd/pelwarden"

// goEnv is the environment of a user's build from the proxy at dir:
// workspace off, the checkout's proxy first, then the module cache of this
// machine (so nothing else is downloaded twice) and the configured proxy;
// no checksum database for the project's own path, whose zips exist only
// here; the check's module cache (see userModCache), holding none of the
// project's modules of an earlier run; and no module index: Go indexes a
// module cache's packages (their imports, say) by directory, taking what
// sits there as immutable, which the project's modules are not from run to
// run (a stale index once compiled a package of this run's source without
// an import it had just gained). The builds use -trimpath, as `make` does:
// Go's build cache then keys a package by its contents, not its directory,
// so the third-party packages the project's own builds compiled serve the
// user's builds from the check's module cache too.
func goEnv(proxyDir, modCache string) ([]string, error) {
	out, err := runIn(".", nil, "go", "env", "GOPROXY", "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("go env GOPROXY GOMODCACHE: %q", out)
	}
	proxies := []string{"file://" + filepath.ToSlash(proxyDir)}
	if cache := strings.TrimSpace(lines[1]); cache != "" {
		if _, err := os.Stat(filepath.Join(cache, "cache", "download")); err == nil {
			proxies = append(proxies, "file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download")))
		}
	}
	if p := strings.TrimSpace(lines[0]); p != "" && p != "off" {
		proxies = append(proxies, p)
	}
	return []string{
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOPROXY=" + strings.Join(proxies, ","),
		"GONOSUMDB=" + projectPath,
		"GOPRIVATE=", "GONOPROXY=",
		"GOMODCACHE=" + modCache,
		"GODEBUG=goindex=0",
	}, nil
}

// userModCache returns the module cache of the check's user builds:
// kept from run to run under the user's cache directory, so that the
// third-party modules are fetched and extracted once, with this project's
// own modules removed first, so that the zips the checkout's proxy serves
// now are the ones used (their version stays the same from run to run
// while their contents change).
// One release check at a time per machine.
func userModCache() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the release check's module cache: %w", err)
	}
	cache := filepath.Join(dir, "pelwarden", "release-modcache")
	return cache, forgetProjectModules(cache)
}

// forgetProjectModules removes this project's modules from the module
// cache at cache: their extracted trees (the root module's beside its
// directory, as pelwarden@v0.1.0; the others under it) and their downloads
// (zips, go.mod files, lists). Other modules stay.
func forgetProjectModules(cache string) error {
	owner, name := path.Split(projectPath) // "github.com/pelwarden/", "pelwarden"
	var dirs []string
	entries, err := os.ReadDir(filepath.Join(cache, filepath.FromSlash(owner)))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("the release check's module cache: %w", err)
	}
	for _, e := range entries {
		if e.Name() == name || strings.HasPrefix(e.Name(), name+"@") {
			dirs = append(dirs, filepath.Join(cache, filepath.FromSlash(owner), e.Name()))
		}
	}
	dirs = append(dirs, filepath.Join(cache, "cache", "download", filepath.FromSlash(projectPath)))
	for _, dir := range dirs {
		// The extracted trees are read-only unless every build used
		// -modcacherw (goEnv's do): make them writable to remove them.
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("the release check's module cache: %w", err)
		}
	}
	return nil
}

// check is the release check: lint (done by the caller), the proxy, the
// user module, go install of the CLI.
func (r *repo) check(version string, w io.Writer) error {
	url := os.Getenv("PELWARDEN_TEST_REDIS_URL")
	if url == "" {
		return fmt.Errorf("PELWARDEN_TEST_REDIS_URL is not set: the check runs the user program, a handler test and the CLI against a server (make release-check starts one with scripts/with-server.sh)")
	}
	tmp, err := os.MkdirTemp("", "pelwarden-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxyDir, user, bin := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "user"), filepath.Join(tmp, "bin")
	if err := writeProxy(r.root, proxyDir, version, r.mods, r.files); err != nil {
		return err
	}
	modCache, err := userModCache()
	if err != nil {
		return err
	}
	env, err := goEnv(proxyDir, modCache)
	if err != nil {
		return err
	}
	step := func(what string) { fmt.Fprintf(w, "release: %s\n", what) }
	step(fmt.Sprintf("serving %d modules at %s from the checkout (file proxy %s)", countPublished(r.mods), version, proxyDir))

	// The user module requires every published library module.
	if err := writeUserModule(user, r.goVersion()); err != nil {
		return err
	}
	var libs []string
	for _, m := range r.mods {
		if m.Published && !commands[m.Dir] {
			libs = append(libs, m.Path+"@"+version)
		}
	}
	goIn := func(args ...string) (string, error) { return runIn(user, env, "go", args...) }
	if _, err := goIn(append([]string{"get"}, libs...)...); err != nil {
		return fmt.Errorf("a user module outside the repository cannot require the release: %w", err)
	}
	if _, err := goIn("mod", "tidy"); err != nil {
		return err
	}
	for _, l := range libs {
		p, _, _ := strings.Cut(l, "@")
		got, err := goIn("list", "-m", "-f", "{{.Version}}", p)
		if err != nil {
			return err
		}
		if strings.TrimSpace(got) != version {
			return fmt.Errorf("the user module builds with %s %s, not %s", p, strings.TrimSpace(got), version)
		}
	}
	step(fmt.Sprintf("a user module outside the repository requires %s", strings.Join(libs, ", ")))
	if _, err := goIn("vet", "./..."); err != nil {
		return err
	}
	if _, err := goIn("build", "-o", filepath.Join(bin, "user"), "."); err != nil {
		return err
	}
	out, err := runIn(user, nil, filepath.Join(bin, "user"))
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	step("built and ran the user program (driver, producer, prommetrics, pelwardenotel, pelwardenwatermill): " + lines[len(lines)-1])
	out, err = goIn("test", "-count=1", "-v", "-run", "TestBadOrdersAreDeadLettered", ".")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "--- PASS: TestBadOrdersAreDeadLettered") {
		return fmt.Errorf("the user's handler test did not pass:\n%s", out)
	}
	step("the user's pelwardentest handler test passed against the server")

	// The CLI, as a user installs it. go install pkg@version reads only
	// the module's go.mod (and refuses replace directives); -mod is not
	// allowed with it.
	installEnv := append(append([]string{}, env...), "GOBIN="+bin, "GOFLAGS=-modcacherw -trimpath")
	if _, err := runIn(tmp, installEnv, "go", "install", cliPackage+"@"+version); err != nil {
		return fmt.Errorf("go install of the CLI: %w", err)
	}
	cli := filepath.Join(bin, "pelwarden")
	out, err = runIn(tmp, nil, cli, "--redis", url, "version", "--json")
	if err != nil {
		return err
	}
	var v struct {
		Version, Library string
		Server           *struct{ Library string }
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return fmt.Errorf("pelwarden version --json: %w: %s", err, out)
	}
	if v.Version != version {
		return fmt.Errorf("the installed pelwarden says it is version %q, not %s", v.Version, version)
	}
	if v.Server == nil || v.Server.Library == "" {
		return fmt.Errorf("pelwarden --redis URL version names no library on the server: %s", out)
	}
	step(fmt.Sprintf("go install %s@%s: `pelwarden version` says %s, library %s (on the server: %s)", cliPackage, version, v.Version, v.Library, v.Server.Library))
	step("passed")
	return nil
}

func countPublished(mods []module) int {
	n := 0
	for _, m := range mods {
		if m.Published {
			n++
		}
	}
	return n
}

// goVersion is the core module's go directive.
func (r *repo) goVersion() string {
	for _, m := range r.mods {
		if m.Dir == "." {
			return m.Mod.Go
		}
	}
	return ""
}

func writeUserModule(dir, goVersion string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	mod := "module example.com/pelwardenuser\n"
	if goVersion != "" {
		mod += "\ngo " + goVersion + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return err
	}
	return fs.WalkDir(userModule, "testdata/user", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := userModule.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, path.Base(p)), data, 0o644)
	})
}

// tidy runs go mod tidy in every module, resolving siblings at version
// through the checkout's proxy, twice (a module's tidy reads its siblings'
// go.mod files as the first pass left them), then drops the sibling lines
// from each go.sum.
func (r *repo) tidy(version string, w io.Writer) error {
	tmp, err := os.MkdirTemp("", "pelwarden-tidy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for pass := 1; pass <= 2; pass++ {
		cur, err := open(r.root)
		if err != nil {
			return err
		}
		proxyDir := filepath.Join(tmp, fmt.Sprint("proxy", pass))
		if err := writeProxy(cur.root, proxyDir, version, cur.mods, cur.files); err != nil {
			return err
		}
		env, err := goEnv(proxyDir, filepath.Join(tmp, fmt.Sprint("modcache", pass)))
		if err != nil {
			return err
		}
		for _, m := range cur.mods {
			dir := filepath.Join(cur.root, filepath.FromSlash(m.Dir))
			if _, err := runIn(dir, env, "go", "mod", "tidy"); err != nil {
				return err
			}
			if err := dropSiblingSums(filepath.Join(dir, "go.sum")); err != nil {
				return err
			}
			if pass == 2 {
				fmt.Fprintf(w, "release: tidied %s\n", m.Dir)
			}
		}
	}
	return nil
}

func dropSiblingSums(file string) error {
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var keep []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		p, _, _ := strings.Cut(l, " ")
		if p == projectPath || strings.HasPrefix(p, projectPath+"/") {
			continue
		}
		keep = append(keep, l)
	}
	return os.WriteFile(file, []byte(strings.Join(keep, "")), 0o644)
}
