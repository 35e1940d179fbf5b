package resp

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// rawEntry is what RawRead reported of one entry, copied.
type rawEntry struct {
	id     string
	fields []string
	extra  int
	before int64
}

func rawRead(t *testing.T, raw string) ([]rawEntry, int, error) {
	t.Helper()
	counted := -1
	var got []rawEntry
	err := RawRead([]byte(raw), func(n int) { counted = n }, func(e *RawEntry) error {
		got = append(got, rawEntry{id: e.ID, fields: append([]string(nil), e.Fields...), extra: e.Extra, before: e.Before})
		return nil
	})
	return got, counted, err
}

// bulk is a RESP bulk string.
func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func TestRawRead(t *testing.T) {
	t.Parallel()
	entries := "*3\r\n" +
		"*2\r\n" + bulk("1-0") + "*4\r\n" + bulk("a") + bulk("1") + bulk("a") + bulk("two\r\nlines") +
		"*2\r\n" + bulk("2-0") + "*0\r\n" +
		"*4\r\n" + bulk("3-0") + "*2\r\n" + bulk("") + bulk("\x00\xff") + ":5000\r\n" + ":2\r\n"
	want := []rawEntry{
		{id: "1-0", fields: []string{"a", "1", "a", "two\r\nlines"}},
		{id: "2-0", fields: []string{}},
		{id: "3-0", fields: []string{"", "\x00\xff"}, extra: 2, before: 2},
	}
	for name, raw := range map[string]string{
		"resp2":      "*1\r\n*2\r\n" + bulk("{s}") + entries,
		"resp3":      "%1\r\n" + bulk("{s}") + entries,
		"bulk count": "%1\r\n" + bulk("{s}") + strings.Replace(entries, ":2\r\n", bulk("2"), 1),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, counted, err := rawRead(t, raw)
			if err != nil || counted != 3 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("RawRead = %v (count %d), %v; want %v", got, counted, err, want)
			}
		})
	}
	for name, raw := range map[string]string{
		"resp2 null": "*-1\r\n",
		"resp3 null": "_\r\n",
		"empty map":  "%0\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, counted, err := rawRead(t, raw)
			if err != nil || len(got) != 0 || counted != -1 {
				t.Fatalf("RawRead = %v (count %d), %v; want nothing", got, counted, err)
			}
		})
	}
}

// TestRawReadKeepsEntriesApart: an entry's strings share one copy of its
// own bytes, not the reply's buffer, which the caller reuses.
func TestRawReadKeepsEntriesApart(t *testing.T) {
	t.Parallel()
	raw := []byte("*1\r\n*2\r\n" + bulk("s") + "*1\r\n*2\r\n" + bulk("1-0") + "*2\r\n" + bulk("k") + bulk("v"))
	var id, value string
	err := RawRead(raw, func(int) {}, func(e *RawEntry) error {
		id, value = e.ID, e.Fields[1]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		raw[i] = 'x'
	}
	if id != "1-0" || value != "v" {
		t.Fatalf("after the buffer changed: id %q, value %q", id, value)
	}
}

// TestRawReadCopiesOnlyTheStrings: an entry's one copy holds its id and
// fields end to end, none of the reply's framing, in one allocation per
// entry. Not parallel: testing.AllocsPerRun counts the whole process's
// allocations.
func TestRawReadCopiesOnlyTheStrings(t *testing.T) {
	reply := func(n int) []byte {
		b := "*1\r\n*2\r\n" + bulk("s") + fmt.Sprintf("*%d\r\n", n)
		for i := range n {
			b += "*2\r\n" + bulk(fmt.Sprintf("%d-0", i+1)) + "*4\r\n" + bulk("name") + bulk("") + bulk("k") + bulk("value")
		}
		return []byte(b)
	}
	read := func(raw []byte) (entries int) {
		err := RawRead(raw, func(int) {}, func(e *RawEntry) error {
			entries++
			next := unsafe.Add(unsafe.Pointer(unsafe.StringData(e.ID)), len(e.ID))
			for _, f := range e.Fields {
				if len(f) > 0 && unsafe.Pointer(unsafe.StringData(f)) != next {
					t.Errorf("%s: field %q is not right after the string before it", e.ID, f)
				}
				next = unsafe.Add(next, len(f))
			}
			if e.Fields[3] != "value" {
				t.Errorf("%s: fields %q", e.ID, e.Fields)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	few, many := reply(2), reply(12)
	if n := read(many); n != 12 {
		t.Fatalf("%d entries read, want 12", n)
	}
	// The first entry sizes RawRead's own buffers; each one after it
	// costs its copy alone.
	extra := testing.AllocsPerRun(20, func() { read(many) }) - testing.AllocsPerRun(20, func() { read(few) })
	if extra != 10 {
		t.Fatalf("ten more entries cost %v more allocations, want 10", extra)
	}
}

func TestRawReadMalformed(t *testing.T) {
	t.Parallel()
	entry := "*2\r\n" + bulk("1-0") + "*2\r\n" + bulk("k") + bulk("v")
	for name, raw := range map[string]string{
		"truncated":         "*1\r\n*2\r\n" + bulk("s") + "*1\r\n" + entry[:len(entry)-3],
		"short string":      "*1\r\n*2\r\n" + bulk("s") + "*1\r\n*2\r\n$9\r\n1-0\r\n*0\r\n",
		"odd fields":        "*1\r\n*2\r\n" + bulk("s") + "*1\r\n*2\r\n" + bulk("1-0") + "*1\r\n" + bulk("k"),
		"null fields":       "*1\r\n*2\r\n" + bulk("s") + "*1\r\n*2\r\n" + bulk("1-0") + "*-1\r\n",
		"integer field":     "*1\r\n*2\r\n" + bulk("s") + "*1\r\n*2\r\n" + bulk("1-0") + "*2\r\n:1\r\n" + bulk("v"),
		"entry not a list":  "*1\r\n*2\r\n" + bulk("s") + "*1\r\n" + bulk("1-0"),
		"bad count":         "*1\r\n*2\r\n" + bulk("s") + "*1\r\n*4\r\n" + bulk("1-0") + "*0\r\n:1\r\n" + bulk("x"),
		"bad length":        "*x\r\n",
		"integer reply":     ":1\r\n",
		"no stream element": "*1\r\n" + bulk("s"),
		"empty":             "",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got, _, err := rawRead(t, raw); err == nil {
				t.Fatalf("RawRead(%q) = %v, nil; want an error", raw, got)
			}
		})
	}
}

func TestIsError(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"-NOGROUP no such key\r\n": true,
		"!5\r\nERR x\r\n":          true,
		"*-1\r\n":                  false,
		"":                         false,
	} {
		if got := IsError([]byte(raw)); got != want {
			t.Errorf("IsError(%q) = %v, want %v", raw, got, want)
		}
	}
}

// str reads a bulk string by its fast path (bulk) exactly as by its
// lines: the same bytes, the same position after it, and an error for
// what the lines refuse.
func TestScannerStrPaths(t *testing.T) {
	t.Parallel()
	cases := []string{"$0\r\n\r\n", "$03\r\nabc\r\n", "$-1\r\n", "$\r\nx\r\n", "$2\r\nabc\r\n",
		"$3\r\nab", "$3\nabc\r\n", "$1x\r\na\r\n", "$99999999999999999999\r\nx\r\n", "+OK\r\n", ":1\r\n", "$5\r\na\r\nb\r\n"}
	for n := range 300 {
		cases = append(cases, bulk(strings.Repeat("x", n))+"*1\r\n")
	}
	for _, c := range cases {
		fast := scanner{b: []byte(c)}
		ffrom, fto, ferr := fast.str()
		slow := scanner{b: []byte(c)}
		sfrom, sto, serr := slow.lineStr()
		if (ferr == nil) != (serr == nil) || ferr == nil && (ffrom != sfrom || fto != sto || fast.i != slow.i) {
			t.Errorf("%q: str = %d, %d, %v (at %d); by lines %d, %d, %v (at %d)", c, ffrom, fto, ferr, fast.i, sfrom, sto, serr, slow.i)
		}
	}
}
