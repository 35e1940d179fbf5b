package doccheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinksResolve checks every relative link of the repository's
// Markdown documents (git ls-files): the files they point to exist, and
// so do the headings their anchors name.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	docs := strings.Fields(string(out))
	if len(docs) < 10 {
		t.Fatalf("found %d documents: %q", len(docs), docs)
	}
	checked, broken, err := Links(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Errorf("checked %d relative links in %d documents; the docs map of the README alone has about 20", checked, len(docs))
	}
	for _, b := range broken {
		t.Error(b)
	}
}

// Links finds a missing file, a missing heading in another document and
// in the same one, and nothing in code; anchors follow GitHub's rules.
func TestLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", strings.Join([]string{
		"# Title",
		"See [the guide](docs/guide.md#choosing-minidle-and-maxdeliveries), [gone](docs/none.md),",
		"[a bad anchor](docs/guide.md#nowhere) and [here](#title), [not here](#nowhere).",
		"`[code](docs/none.md)` and [a site](https://example.com/x#y).",
		"```",
		"[in a block](docs/none.md)",
		"```",
	}, "\n"))
	write("docs/guide.md", strings.Join([]string{
		"# Choosing `MinIdle` and MaxDeliveries",
		"## Notes",
		"## Notes",
		"## The [linked](x.md) one: 1,000,000 entries!",
		"```",
		"# not a heading",
		"```",
		"Back to [the start](../README.md#title), [repeat](#notes-1), [linked](#the-linked-one-1000000-entries), [block](#not-a-heading).",
	}, "\n"))
	write("docs/x.md", "x")
	checked, broken, err := Links(dir, []string{"README.md", "docs/guide.md"})
	if err != nil {
		t.Fatal(err)
	}
	if checked != 10 {
		t.Errorf("checked %d links, want 10", checked)
	}
	var got []string
	for _, b := range broken {
		got = append(got, b.String())
	}
	want := []string{
		"README.md:2: docs/none.md: no such file",
		"README.md:3: docs/guide.md#nowhere: no such heading in docs/guide.md",
		"README.md:3: #nowhere: no such heading in README.md",
		"docs/guide.md:8: #not-a-heading: no such heading in docs/guide.md",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
