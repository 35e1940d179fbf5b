package pelwarden

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// luaFunction is what lua/pelwarden.lua says of one function: its flags
// (the FUNCTIONS table) and how many keys its header names.
type luaFunction struct {
	flags []string
	keys  int
}

// luaFunctions reads the registered functions and their headers from the
// library's source.
func luaFunctions(t *testing.T) map[string]*luaFunction {
	t.Helper()
	out := map[string]*luaFunction{}
	reg := regexp.MustCompile(`\{name = '(pelwarden_v1_[a-z_]+)', fn = [a-z]+, flags = \{([^}]*)\}\}`)
	for _, m := range reg.FindAllStringSubmatch(librarySource, -1) {
		f := &luaFunction{}
		for _, flag := range strings.Split(m[2], ",") {
			if flag = strings.Trim(strings.TrimSpace(flag), "'"); flag != "" {
				f.flags = append(f.flags, flag)
			}
		}
		out[m[1]] = f
	}
	// A header runs from "-- pelwarden_v1_name:" to the first line that is
	// not a comment; its keys are the highest KEYS[n] it names.
	head := regexp.MustCompile(`^-- (pelwarden_v1_[a-z_]+):`)
	key := regexp.MustCompile(`KEYS\[(\d+)\]`)
	var cur *luaFunction
	for _, line := range strings.Split(librarySource, "\n") {
		if m := head.FindStringSubmatch(line); m != nil {
			cur = out[m[1]]
			if cur == nil {
				t.Errorf("lua/pelwarden.lua has a header for %s, which it does not register", m[1])
			}
			continue
		}
		if !strings.HasPrefix(line, "--") {
			cur = nil
			continue
		}
		if cur == nil {
			continue
		}
		for _, k := range key.FindAllStringSubmatch(line, -1) {
			n, err := strconv.Atoi(k[1])
			if err != nil {
				t.Fatal(err)
			}
			cur.keys = max(cur.keys, n)
		}
	}
	return out
}

// The function reference (docs/reference/functions.md) names every
// function the library registers, with its flags and as many keys as its
// header in lua/pelwarden.lua, and no other: the two cannot drift.
func TestFunctionReferenceMatchesTheLibrary(t *testing.T) {
	t.Parallel()
	lua := luaFunctions(t)
	if len(lua) < 20 {
		t.Fatalf("read %d registered functions from lua/pelwarden.lua; the parser is out of step with it", len(lua))
	}
	doc, err := os.ReadFile("docs/reference/functions.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(pelwarden_v1_[a-z_]+)`( \\(([^)]*)\\))? \\| ([^|]*) \\|")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		name, notes, keys := m[1], m[3], strings.TrimSpace(m[4])
		seen[name] = true
		f, ok := lua[name]
		if !ok {
			t.Errorf("the reference documents %s, which the library does not register", name)
			continue
		}
		for _, flag := range []string{"allow-oom", "no-writes"} {
			if documented, registered := strings.Contains(notes, flag), slices.Contains(f.flags, flag); documented != registered {
				t.Errorf("%s: the reference says %q for its flags, the library registers %v", name, notes, f.flags)
			}
		}
		n := 0
		if keys != "—" {
			n = len(strings.Split(keys, ","))
		}
		if n != f.keys {
			t.Errorf("%s: the reference names %d keys (%q), its header in lua/pelwarden.lua %d", name, n, keys, f.keys)
		}
	}
	for name := range lua {
		if !seen[name] {
			t.Errorf("the library registers %s, which the reference (docs/reference/functions.md) does not document", name)
		}
	}
}
