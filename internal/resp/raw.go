package resp

// Reading the raw bytes of an XREADGROUP reply (go-redis's RawCmd), for the
// driver's reads: go-redis's generic reply boxes every string and slice of
// the reply in an interface, about ten allocations per entry, where the
// raw reply needs one per entry (see RawRead).

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// RawEntry is one entry of a raw XREADGROUP reply. Its id and fields are
// substrings of one string, a copy of the entry's id and fields end to
// end (without the reply's framing): a handler that keeps one of them
// keeps no other entry's bytes alive.
type RawEntry struct {
	ID string
	// Fields holds the entry's field names and values, alternating, in
	// stream order (duplicates included); it is only valid until the next
	// call of the RawRead's callback.
	Fields []string
	// Extra is the number of elements after the fields: XREADGROUP ...
	// CLAIM adds two, the idle time and Before.
	Extra int
	// Before is the second element after the fields, an integer (or a
	// string holding one), when Extra is at least 2: the number of
	// deliveries before this one.
	Before int64
}

// IsError reports whether raw is an error reply (RESP2 "-", RESP3 "!"),
// which RawCmd returns as bytes rather than as an error.
func IsError(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] == '!')
}

// RawRead reads the raw XREADGROUP reply of one stream, RESP2
// [[stream, entries]] or RESP3 {stream: entries} (a null: no entries),
// calling each for every entry in order. It first calls count with the
// number of entries (not at all for a null reply). An entry whose fields
// are not a list of strings of even length is an error, as are
// malformed bytes.
func RawRead(raw []byte, count func(n int), each func(e *RawEntry) error) error {
	s := scanner{b: raw}
	kind, n, err := s.header()
	if err != nil {
		return err
	}
	switch {
	case kind == '_' || (kind == '*' || kind == '%') && n < 0:
		return nil
	case kind == '*' && n >= 1:
		// [[stream, entries], ...]: the first stream's.
		if kind, n, err = s.header(); err != nil {
			return err
		}
		if kind != '*' || n < 2 {
			return fmt.Errorf("XREADGROUP: unexpected stream element %q", kind)
		}
	case kind == '%' && n >= 1:
	case kind == '*' && n == 0, kind == '%' && n == 0:
		return nil
	default:
		return fmt.Errorf("XREADGROUP: unexpected reply %q", kind)
	}
	if _, _, err := s.str(); err != nil { // the stream's name
		return err
	}
	kind, n, err = s.header()
	if err != nil {
		return err
	}
	if kind != '*' || n < 0 {
		return fmt.Errorf("XREADGROUP: unexpected entries %q", kind)
	}
	count(n)
	var e RawEntry
	var offs []int // where the id and each field are in raw: start and end of each
	for range n {
		kind, m, err := s.header()
		if err != nil {
			return err
		}
		if kind != '*' || m < 2 {
			return fmt.Errorf("XREADGROUP: unexpected entry %q", kind)
		}
		idFrom, idTo, err := s.str()
		if err != nil {
			return fmt.Errorf("XREADGROUP: unexpected id: %w", err)
		}
		id := raw[idFrom:idTo] // for errors; the entry's ID is a substring of data
		kind, k, err := s.header()
		if err != nil {
			return err
		}
		if kind != '*' || k < 0 || k%2 != 0 {
			return fmt.Errorf("XREADGROUP: unexpected fields of %s", id)
		}
		offs = append(offs[:0], idFrom, idTo)
		size := idTo - idFrom
		for range k {
			from, to, err := s.str()
			if err != nil {
				return fmt.Errorf("XREADGROUP: non-string field in %s", id)
			}
			offs = append(offs, from, to)
			size += to - from
		}
		// The entry's one allocation: its strings end to end, without the
		// reply's framing (a third of a small entry's bytes).
		var b strings.Builder
		b.Grow(size)
		for j := 0; j < len(offs); j += 2 {
			b.Write(raw[offs[j]:offs[j+1]])
		}
		data := b.String()
		e.ID = data[:idTo-idFrom]
		e.Fields = e.Fields[:0]
		at := len(e.ID)
		for j := 2; j < len(offs); j += 2 {
			end := at + offs[j+1] - offs[j]
			e.Fields = append(e.Fields, data[at:end])
			at = end
		}
		e.Extra, e.Before = m-2, 0
		for j := range m - 2 {
			if j != 1 {
				if err := s.skip(); err != nil {
					return err
				}
				continue
			}
			if e.Before, err = s.int(); err != nil {
				return fmt.Errorf("XREADGROUP: unexpected delivery count of %s: %w", id, err)
			}
		}
		if err := each(&e); err != nil {
			return err
		}
	}
	return nil
}

// scanner reads RESP elements from b, from i on.
type scanner struct {
	b []byte
	i int
}

// line returns the next line without its CRLF.
func (s *scanner) line() ([]byte, error) {
	j := bytes.IndexByte(s.b[s.i:], '\r')
	if j < 1 || s.i+j+1 >= len(s.b) || s.b[s.i+j+1] != '\n' {
		return nil, fmt.Errorf("XREADGROUP: truncated reply at byte %d", s.i)
	}
	l := s.b[s.i : s.i+j]
	s.i += j + 2
	return l, nil
}

// header reads an element's type line: its kind and its number (the
// length or count; -1 for a RESP2 null; 0 for kinds without one).
func (s *scanner) header() (kind byte, n int, err error) {
	l, err := s.line()
	if err != nil {
		return 0, 0, err
	}
	switch l[0] {
	case '*', '%', '~', '>', '$', '=', '!':
		n, ok := parseLen(l[1:])
		if !ok {
			return 0, 0, fmt.Errorf("XREADGROUP: bad length %q", l)
		}
		kind := l[0]
		if kind == '~' {
			kind = '*' // a set is read as a list
		}
		return kind, n, nil
	case '_':
		return '_', -1, nil
	}
	return l[0], 0, nil
}

// parseLen parses a RESP length: decimal digits, or -1.
func parseLen(b []byte) (int, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// skip reads one element of any kind.
func (s *scanner) skip() error {
	kind, n, err := s.header()
	if err != nil {
		return err
	}
	switch kind {
	case '*', '>':
	case '%':
		n *= 2
	case '$', '=', '!':
		if n < 0 {
			return nil
		}
		if s.i+n+2 > len(s.b) {
			return fmt.Errorf("XREADGROUP: truncated string at byte %d", s.i)
		}
		s.i += n + 2
		return nil
	default: // one line: simple string, integer, double, boolean, null...
		return nil
	}
	for range max(n, 0) {
		if err := s.skip(); err != nil {
			return err
		}
	}
	return nil
}

// str reads a bulk or simple string and returns where its bytes are in b.
func (s *scanner) str() (from, to int, err error) {
	if from, to, ok := s.bulk(); ok {
		return from, to, nil
	}
	return s.lineStr()
}

// lineStr is str by the string's first line: the path of simple strings,
// and of malformed bulk strings, which it describes.
func (s *scanner) lineStr() (from, to int, err error) {
	start := s.i
	l, err := s.line()
	if err != nil {
		return 0, 0, err
	}
	switch l[0] {
	case '+':
		return start + 1, start + len(l), nil
	case '$':
		n, ok := parseLen(l[1:])
		if !ok || n < 0 {
			return 0, 0, fmt.Errorf("not a string: %q", l)
		}
		from, to = s.i, s.i+n
		if to+2 > len(s.b) || s.b[to] != '\r' || s.b[to+1] != '\n' {
			return 0, 0, fmt.Errorf("truncated string at byte %d", from)
		}
		s.i = to + 2
		return from, to, nil
	}
	return 0, 0, fmt.Errorf("not a string: %q", l)
}

// bulk is str's path for a well-formed bulk string, nearly every string
// of a reply: it reads the length digit by digit up to its CRLF, without
// looking for the line's end first. It reports false, reading nothing,
// for anything else (str then reads it, or says what is wrong).
func (s *scanner) bulk() (from, to int, ok bool) {
	b, i := s.b, s.i
	if i >= len(b) || b[i] != '$' {
		return 0, 0, false
	}
	n, j := 0, i+1
	for ; j < len(b) && j-i <= 18 && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int(b[j]-'0')
	}
	if j == i+1 || j+1 >= len(b) || b[j] != '\r' || b[j+1] != '\n' {
		return 0, 0, false
	}
	from, to = j+2, j+2+n
	if to+2 > len(b) || b[to] != '\r' || b[to+1] != '\n' {
		return 0, 0, false
	}
	s.i = to + 2
	return from, to, true
}

// int reads an integer, or a bulk string holding one.
func (s *scanner) int() (int64, error) {
	save := s.i
	l, err := s.line()
	if err != nil {
		return 0, err
	}
	if l[0] == ':' {
		return strconv.ParseInt(string(l[1:]), 10, 64)
	}
	s.i = save
	from, to, err := s.str()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(s.b[from:to]), 10, 64)
}
