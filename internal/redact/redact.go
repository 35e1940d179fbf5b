// Package redact hides passwords in server URLs and in messages that quote
// them: the one redactor of the CLI, the test kit and the benchmarks, with
// one placeholder.
package redact

import (
	"regexp"
	"strings"
)

// Placeholder replaces a password.
const Placeholder = "xxxxx"

// SplitPassword splits a URL given by a person around its password: the
// text between the first ':' after "scheme://user" and the last '@', the
// way a person may write it without escaping ("redis://u:pa/ss #1@host"),
// so that such a URL is redacted too, although it does not parse.
func SplitPassword(raw string) (before, pass, after string, ok bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return "", "", "", false
	}
	at := strings.LastIndexByte(raw, '@')
	colon := strings.IndexByte(raw[i+3:], ':')
	if at < 0 || colon < 0 || i+3+colon > at || strings.ContainsAny(raw[i+3:i+3+colon], "/@") {
		return "", "", "", false
	}
	c := i + 3 + colon
	return raw[:c+1], raw[c+1 : at], raw[at:], true
}

// URL returns one URL with its password replaced by Placeholder (the URL
// unchanged when it has none).
func URL(raw string) string {
	if before, _, after, ok := SplitPassword(raw); ok {
		return before + Placeholder + after
	}
	return raw
}

// userinfoRE matches the user:password@ part of URLs in a message.
var userinfoRE = regexp.MustCompile(`(\w+://[^:@/\s]*):(\S*)@`)

// Message replaces the password of every URL in a message with
// Placeholder (up to the last '@' before a space, also when a URL does not
// parse).
func Message(s string) string {
	return userinfoRE.ReplaceAllString(s, "${1}:"+Placeholder+"@")
}
