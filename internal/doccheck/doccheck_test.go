package doccheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// TestSnippetsBuild builds every Go snippet of README.md and docs/
// against the repository's code: each in a package of its own, in a
// module outside the repository that the workspace (go.work) resolves to
// the checkout.
func TestSnippetsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every snippet (about half a minute)")
	}
	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	var all []Snippet
	for _, d := range docs {
		text, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, Snippets(d, text)...)
	}
	if len(all) < 10 {
		t.Fatalf("found %d Go snippets in %d documents; the README alone has three", len(all), len(docs))
	}
	dir := t.TempDir()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	writeWorkspace(t, dir, abs)
	byPkg := map[string]Snippet{}
	var pkgs []string
	for i, s := range all {
		pkg := fmt.Sprintf("s%02d", i)
		files, err := Program(pkg, s)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for name, src := range files {
			write(t, filepath.Join(dir, "snippets", pkg, name), src)
		}
		byPkg[pkg] = s
		pkgs = append(pkgs, "./"+pkg)
	}
	cmd := exec.Command("go", append([]string{"build", "-o", os.DevNull}, pkgs...)...)
	cmd.Dir = filepath.Join(dir, "snippets")
	// -trimpath: the snippets' module is in a new directory each run, and
	// without the paths in the build Go's build cache serves what an
	// earlier run compiled (about half a minute otherwise).
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=-trimpath")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	// Name each failing snippet by its document and line.
	report := string(out)
	for pkg, s := range byPkg {
		report = strings.ReplaceAll(report, pkg+"/snippet.go", s.Name()+" (as "+pkg+"/snippet.go)")
	}
	t.Fatalf("the documents' Go snippets do not build (%v); mark a block that is not meant to compile with %q on the line before it:\n%s", err, FragmentMarker, report)
}

// writeWorkspace writes, in dir, a module for the snippets that requires
// every module of the repository, and a go.work using the snippets'
// module and the repository's modules (with the repository's replace
// lines and sums), so the snippets build against the checkout.
func writeWorkspace(t *testing.T, dir, repo string) {
	t.Helper()
	work, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	// The repository's relative paths become absolute.
	rel := regexp.MustCompile(`(?m)(^\s*|=>\s*)\./?([^\s)]*)`)
	w := rel.ReplaceAllStringFunc(string(work), func(m string) string {
		sub := rel.FindStringSubmatch(m)
		return sub[1] + filepath.Join(repo, sub[2])
	})
	w = strings.Replace(w, "use (", "use (\n\t./snippets", 1)
	write(t, filepath.Join(dir, "go.work"), []byte(w))

	// Every requirement of the repository's modules, and their sums.
	reqs := map[string]string{}
	var sums bytes.Buffer
	line := regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-zA-Z0-9./_~-]+\.[a-z]+/[^\s]+)\s+(v[^\s]+)`)
	for _, m := range []string{".", "driver/prommetrics", "pelwardenotel", "pelwardentest", "pelwardenwatermill"} {
		mod, err := os.ReadFile(filepath.Join(repo, m, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range line.FindAllStringSubmatch(string(mod), -1) {
			if v, ok := reqs[r[1]]; !ok || v < r[2] {
				reqs[r[1]] = r[2]
			}
		}
		if sum, err := os.ReadFile(filepath.Join(repo, m, "go.sum")); err == nil {
			sums.Write(sum)
		}
	}
	for _, m := range []string{"github.com/pelwarden/pelwarden", "github.com/pelwarden/pelwarden/driver/prommetrics",
		"github.com/pelwarden/pelwarden/pelwardenotel", "github.com/pelwarden/pelwarden/pelwardentest",
		"github.com/pelwarden/pelwarden/pelwardenwatermill"} {
		reqs[m] = "v0.1.0"
	}
	var mod bytes.Buffer
	mod.WriteString("module example.com/snippets\n\ngo 1.26.0\n\nrequire (\n")
	for p, v := range reqs {
		fmt.Fprintf(&mod, "\t%s %s\n", p, v)
	}
	mod.WriteString(")\n")
	write(t, filepath.Join(dir, "snippets", "go.mod"), mod.Bytes())
	write(t, filepath.Join(dir, "snippets", "go.sum"), sums.Bytes())
	if ws, err := os.ReadFile(filepath.Join(repo, "go.work.sum")); err == nil {
		write(t, filepath.Join(dir, "go.work.sum"), ws)
	}
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A fragment marker leaves its block out; blocks of other languages are
// not snippets; a snippet knows its line.
func TestSnippets(t *testing.T) {
	t.Parallel()
	doc := "# T\n\n```go\nx := 1\n```\n\n" + FragmentMarker + "\n```go\nfunc (\n```\n\n```sh\nmake test\n```\n"
	got := Snippets("d.md", []byte(doc))
	if len(got) != 1 || got[0].Line != 3 || got[0].Code != "x := 1\n" {
		t.Fatalf("Snippets = %+v", got)
	}
}

// A body's declared names are used, its packages imported, and a name
// it declares at the top level is not declared again by the preamble.
func TestProgram(t *testing.T) {
	t.Parallel()
	files, err := Program("p", Snippet{File: "d.md", Line: 3, Code: "res, err := producer.New(rdb, producer.Config{})\n"})
	if err != nil {
		t.Fatal(err)
	}
	src := string(files["snippet.go"])
	for _, want := range []string{`"github.com/pelwarden/pelwarden/producer"`, "_ = res", "_ = err", "func snippet() error {"} {
		if !strings.Contains(src, want) {
			t.Errorf("snippet.go lacks %q:\n%s", want, src)
		}
	}
	files, err = Program("p", Snippet{File: "d.md", Line: 3, Code: "func bill(ctx context.Context, order string) error { return nil }\n"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(files["preamble.go"]), "func bill") {
		t.Errorf("the preamble declares bill again:\n%s", files["preamble.go"])
	}
}
