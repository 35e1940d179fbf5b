package doccheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// BrokenLink is a link of a document whose target is missing: a file of
// the repository that does not exist, or a heading (#anchor) that the
// target document does not have.
type BrokenLink struct {
	File   string // the document, relative to the repository
	Line   int
	Target string
	Reason string
}

func (b BrokenLink) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", b.File, b.Line, b.Target, b.Reason)
}

// linkPattern matches a Markdown link or image, [text](target "title"),
// capturing the target.
var linkPattern = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// Links checks the relative links of docs (paths relative to root), and
// returns how many it checked and those that are broken: each
// target file exists, and each #anchor names a heading of its document,
// as GitHub names headings (see anchors). Links to other sites are not
// followed; links inside code (fenced blocks and `spans`) are not links.
func Links(root string, docs []string) (checked int, broken []BrokenLink, err error) {
	anchorsOf := map[string]map[string]bool{}
	anchorSet := func(rel string) (map[string]bool, error) {
		if a, ok := anchorsOf[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		anchorsOf[rel] = a
		return a, nil
	}
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			return checked, broken, err
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				rel := doc
				if file != "" {
					rel = path.Clean(path.Join(path.Dir(doc), file))
					if strings.HasPrefix(rel, "../") {
						broken = append(broken, BrokenLink{doc, i + 1, target, "outside the repository"})
						continue
					}
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
						broken = append(broken, BrokenLink{doc, i + 1, target, "no such file"})
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(rel, ".md") {
					continue // a line anchor of a source file (#L10): GitHub's
				}
				set, err := anchorSet(rel)
				if err != nil {
					return checked, broken, err
				}
				if !set[anchor] {
					broken = append(broken, BrokenLink{doc, i + 1, target, "no such heading in " + rel})
				}
			}
		}
	}
	return checked, broken, nil
}

// proseLines returns the document's lines with fenced code blocks blanked
// and inline code spans removed, numbered as in the document.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	out := make([]string, len(lines))
	eachOutsideCode(lines, func(i int, line string) { out[i] = stripCodeSpans(line) })
	return out
}

// eachOutsideCode calls fn with every line (and its index) that is not in
// a fenced code block or one of its fences.
func eachOutsideCode(lines []string, fn func(i int, line string)) {
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		fn(i, line)
	}
}

// stripCodeSpans removes `code` spans from a line.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(line, '`')
		if open < 0 {
			b.WriteString(line)
			return b.String()
		}
		closing := strings.IndexByte(line[open+1:], '`')
		if closing < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:open])
		line = line[open+1+closing+1:]
	}
}

// headingLink matches a link in a heading, whose text is what the anchor
// is made of.
var headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// anchors returns the anchors of a document's headings, as GitHub makes
// them: the heading's text in lower case, without punctuation but for
// hyphens and underscores, spaces turned to hyphens; a repeated one gets
// -1, -2... Headings in code blocks are not headings.
func anchors(doc string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	eachOutsideCode(strings.Split(doc, "\n"), func(_ int, line string) {
		if !strings.HasPrefix(line, "#") {
			return
		}
		text := strings.TrimLeft(line, "#")
		if text == "" || text[0] != ' ' {
			return // #hashtag, not a heading
		}
		slug := slugify(headingLink.ReplaceAllString(strings.TrimSpace(text), "$1"))
		if n := seen[slug]; n > 0 {
			set[slug+"-"+strconv.Itoa(n)] = true
		} else {
			set[slug] = true
		}
		seen[slug]++
	})
	return set
}

func slugify(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
