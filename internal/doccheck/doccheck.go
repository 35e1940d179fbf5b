// Package doccheck checks the repository's documents: every Go snippet of
// README.md and docs/ builds against the current API (see Snippets and
// Program), so an example cannot drift from the code it shows, and every
// relative link of every Markdown document leads to a file and heading
// that exist (see Links).
//
// A snippet is a fenced block marked go. One that declares functions or
// types is a file of its own; any other is a function body. Names the
// documents use without declaring them (ctx, rdb, a handler h, bill...)
// come from a small preamble. A block preceded by the line
//
//	<!-- snippet: fragment -->
//
// is meant not to compile (a part of a signature, a diff) and is skipped.
package doccheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FragmentMarker, on the line before a Go block, says the block is not
// meant to compile.
const FragmentMarker = "<!-- snippet: fragment -->"

// Snippet is one Go block of a document.
type Snippet struct {
	File string // the document, relative to the repository
	Line int    // the line of the opening fence
	Code string
}

// Name is file:line, for messages.
func (s Snippet) Name() string { return fmt.Sprintf("%s:%d", s.File, s.Line) }

// Documents returns README.md and every .md file under docs/ in the
// repository at root, relative to it, sorted.
func Documents(root string) ([]string, error) {
	docs := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			docs = append(docs, rel)
		}
		return nil
	})
	sort.Strings(docs[1:])
	return docs, err
}

// Snippets returns the Go blocks of the document text (named file), those
// marked as fragments left out.
func Snippets(file string, text []byte) []Snippet {
	var out []Snippet
	lines := strings.Split(string(text), "\n")
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		start := i
		lang := strings.TrimPrefix(fence, "```")
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		if lang != "go" || start > 0 && strings.TrimSpace(lines[start-1]) == FragmentMarker {
			continue
		}
		out = append(out, Snippet{File: file, Line: start + 1, Code: strings.Join(body, "\n") + "\n"})
	}
	return out
}

// imports are the packages a snippet may use, by the name it uses them
// under.
var imports = map[string]string{
	"context":            "context",
	"errors":             "errors",
	"fmt":                "fmt",
	"http":               "net/http",
	"log":                "log",
	"os":                 "os",
	"slog":               "log/slog",
	"strconv":            "strconv",
	"strings":            "strings",
	"testing":            "testing",
	"time":               "time",
	"tls":                "crypto/tls",
	"x509":               "crypto/x509",
	"signal":             "os/signal",
	"redis":              "github.com/redis/go-redis/v9",
	"pelwarden":          "github.com/pelwarden/pelwarden",
	"driver":             "github.com/pelwarden/pelwarden/driver",
	"producer":           "github.com/pelwarden/pelwarden/producer",
	"pelwardentest":      "github.com/pelwarden/pelwarden/pelwardentest",
	"prommetrics":        "github.com/pelwarden/pelwarden/driver/prommetrics",
	"pelwardenotel":      "github.com/pelwarden/pelwarden/pelwardenotel",
	"pelwardenwatermill": "github.com/pelwarden/pelwarden/pelwardenwatermill",
	"watermill":          "github.com/ThreeDotsLabs/watermill",
	"message":            "github.com/ThreeDotsLabs/watermill/message",
	"prometheus":         "github.com/prometheus/client_golang/prometheus",
	"promhttp":           "github.com/prometheus/client_golang/prometheus/promhttp",
}

// preamble declares what the documents use without declaring it, each
// with the packages it needs; a snippet that declares one of these names
// itself keeps its own.
var preamble = []struct{ name, decl string }{
	{"ctx", "var ctx context.Context"},
	{"rdb", "var rdb *redis.Client"},
	{"lib", "var lib *pelwarden.Library"},
	{"h", "var h driver.Handler"},
	{"bill", "func bill(context.Context, any) error { return nil }"},
	{"customerID", "var customerID string"},
	{"logger", "var logger watermill.LoggerAdapter"},
	{"c", "var c *driver.Consumer"},
	{"p", "var p *producer.Producer"},
	{"charge", "var charge driver.Handler"},
	{"invoice", "func invoice(m *message.Message) *message.Message { return m }"},
}

// Program returns the Go files of package pkg that build snippet s: the
// snippet's own file and the preamble's.
func Program(pkg string, s Snippet) (map[string][]byte, error) {
	code := s.Code
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "", "package p\n"+code, parser.SkipObjectResolution)
	topLevel := err == nil && len(file.Decls) > 0
	var declared map[string]bool
	if topLevel {
		declared = topNames(file)
	} else {
		body, err := parser.ParseFile(fset, "", "package p\nfunc _() error {\n"+code+"\nreturn nil\n}\n", parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("%s: neither declarations nor statements: %w", s.Name(), err)
		}
		// Every name the body declares at its top level is used once, so
		// that a snippet which only shows a call still builds.
		var uses []string
		for _, name := range bodyNames(body) {
			uses = append(uses, "_ = "+name)
		}
		code = "func snippet() error {\n" + code + "\n" + strings.Join(uses, "\n") + "\nreturn nil\n}\n"
		declared = map[string]bool{}
	}
	var src bytes.Buffer
	fmt.Fprintf(&src, "// %s\n\npackage %s\n\n", s.Name(), pkg)
	writeImports(&src, code)
	src.WriteString(code)

	var pre bytes.Buffer
	var decls []string
	for _, p := range preamble {
		if !declared[p.name] {
			decls = append(decls, p.decl)
		}
	}
	fmt.Fprintf(&pre, "package %s\n\n", pkg)
	all := strings.Join(decls, "\n")
	writeImports(&pre, all)
	pre.WriteString(all + "\n")
	return map[string][]byte{"snippet.go": src.Bytes(), "preamble.go": pre.Bytes()}, nil
}

// writeImports writes the import block of the packages code uses.
func writeImports(w *bytes.Buffer, code string) {
	seen := map[string]bool{}
	var paths []string
	for _, name := range qualifiers(code) {
		if path, ok := imports[name]; ok && !seen[path] {
			seen[path] = true
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return
	}
	sort.Strings(paths)
	w.WriteString("import (\n")
	for _, p := range paths {
		fmt.Fprintf(w, "\t%q\n", p)
	}
	w.WriteString(")\n\n")
}

// qualifiers returns the names code uses before a dot ("driver" in
// driver.New), comments and strings left out.
func qualifiers(code string) []string {
	var sc scanner.Scanner
	fset := token.NewFileSet()
	sc.Init(fset.AddFile("", -1, len(code)), []byte(code), nil, 0)
	var out []string
	prev, prevLit := token.ILLEGAL, ""
	for {
		_, tok, lit := sc.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.PERIOD && prev == token.IDENT {
			out = append(out, prevLit)
		}
		prev, prevLit = tok, lit
	}
}

// topNames returns the names a file declares at its top level.
func topNames(f *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				out[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						out[n.Name] = true
					}
				case *ast.TypeSpec:
					out[sp.Name.Name] = true
				}
			}
		}
	}
	return out
}

// bodyNames returns the names the statements of f's one function declare
// at their top level (:= and var), blank ones left out.
func bodyNames(f *ast.File) []string {
	var out []string
	seen := map[string]bool{}
	add := func(id *ast.Ident) {
		if id.Name != "_" && !seen[id.Name] {
			seen[id.Name] = true
			out = append(out, id.Name)
		}
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		for _, st := range fd.Body.List {
			switch st := st.(type) {
			case *ast.AssignStmt:
				if st.Tok == token.DEFINE {
					for _, l := range st.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							add(id)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := st.Decl.(*ast.GenDecl); ok {
					for _, sp := range g.Specs {
						if vs, ok := sp.(*ast.ValueSpec); ok {
							for _, n := range vs.Names {
								add(n)
							}
						}
					}
				}
			}
		}
	}
	return out
}
