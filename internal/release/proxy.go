package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// writeProxy serves the published modules from the checkout in the go
// command's file-proxy layout (GOPROXY=file://dir): for each module,
// dir/<escaped path>/@v/ holds list, <version>.info, <version>.mod and
// <version>.zip, whose files sit under the prefix <path>@<version>/. A
// module's zip leaves out every nested module.
func writeProxy(root, dir, version string, mods []module, list []string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	for _, m := range mods {
		if !m.Published {
			continue
		}
		esc, err := escapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		info, err := json.Marshal(struct{ Version, Time string }{version, now})
		if err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  m.ModFile,
		} {
			if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
				return err
			}
		}
		if err := writeZip(root, filepath.Join(vdir, version+".zip"), m, version, moduleFiles(m, mods, list)); err != nil {
			return fmt.Errorf("module %s: %w", m.Path, err)
		}
	}
	return nil
}

// moduleFiles lists the files of m: those under its directory and not under
// another module's.
func moduleFiles(m module, mods []module, list []string) []string {
	var out []string
	for _, f := range list {
		if owner(f, mods) == m.Dir {
			out = append(out, f)
		}
	}
	return out
}

// owner is the directory of the innermost module holding file f.
func owner(f string, mods []module) string {
	best := ""
	for _, m := range mods {
		if m.Dir == "." {
			if best == "" {
				best = "."
			}
			continue
		}
		if strings.HasPrefix(f, m.Dir+"/") && len(m.Dir) > len(best) {
			best = m.Dir
		}
	}
	return best
}

// writeZip writes the module zip of m at version.
func writeZip(root, file string, m module, version string, list []string) (err error) {
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(out)
	prefix := m.Path + "@" + version + "/"
	for _, f := range list {
		rel := f
		if m.Dir != "." {
			rel = strings.TrimPrefix(f, m.Dir+"/")
		}
		if err := addFile(zw, filepath.Join(root, filepath.FromSlash(f)), prefix+rel); err != nil {
			return err
		}
	}
	return zw.Close()
}

func addFile(zw *zip.Writer, src, name string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	w, err := zw.Create(name)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, in)
	return err
}

// escapePath is the go command's case encoding of a module path: each
// upper-case letter becomes '!' and the letter in lower case.
func escapePath(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= 0x80:
			return "", fmt.Errorf("module path %q: unexpected character %q", p, r)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(r + ('a' - 'A'))
		default:
			b.WriteRune(r)
		}
	}
	return path.Clean(b.String()), nil
}
