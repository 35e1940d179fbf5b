package resp

import (
	"testing"
)

func TestReadEntries(t *testing.T) {
	t.Parallel()
	entries := []any{
		[]any{"1-0", []any{"a", "1", "a", "2"}},
		[]any{"2-0", []any{[]byte("b"), "3"}, int64(5), int64(1)},
	}
	for name, v := range map[string]any{
		"resp2": []any{[]any{"s", entries}},
		"resp3": map[any]any{"s": entries},
		"map":   map[string]any{"s": entries},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			list, fields, err := ReadEntries(v)
			if err != nil || len(list) != 2 || fields != 3 {
				t.Fatalf("ReadEntries = %d entries, %d fields, %v; want 2, 3, nil", len(list), fields, err)
			}
			id, flat, extra, err := Entry(list[0])
			if err != nil || id != "1-0" || len(flat) != 4 || len(extra) != 0 {
				t.Fatalf("Entry(0) = %q, %v, %v, %v", id, flat, extra, err)
			}
			if n, v, err := Field(flat, 1, id); err != nil || n != "a" || v != "2" {
				t.Fatalf("Field(1) = %q, %q, %v; want a, 2 (duplicates kept, in order)", n, v, err)
			}
			id, flat, extra, err = Entry(list[1])
			if err != nil || id != "2-0" || len(extra) != 2 || extra[1] != int64(1) {
				t.Fatalf("Entry(1) = %q, %v, %v, %v", id, flat, extra, err)
			}
			if n, v, err := Field(flat, 0, id); err != nil || n != "b" || v != "3" {
				t.Fatalf("Field(0) = %q, %q, %v; want b, 3 ([]byte read as a string)", n, v, err)
			}
		})
	}
}

func TestReadEntriesEmpty(t *testing.T) {
	t.Parallel()
	for _, v := range []any{nil, []any{}} {
		list, fields, err := ReadEntries(v)
		if err != nil || list != nil || fields != 0 {
			t.Fatalf("ReadEntries(%#v) = %v, %d, %v; want nothing", v, list, fields, err)
		}
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	for _, v := range []any{"x", int64(1), []any{"s"}, []any{[]any{"s"}}, []any{[]any{"s", "entries"}}} {
		if _, _, err := ReadEntries(v); err == nil {
			t.Errorf("ReadEntries(%#v): no error", v)
		}
	}
	for _, e := range []any{"x", []any{"1-0"}, []any{int64(1), []any{}}, []any{"1-0", []any{"a"}}, []any{"1-0", "a"}} {
		if _, _, _, err := Entry(e); err == nil {
			t.Errorf("Entry(%#v): no error", e)
		}
	}
	if _, _, err := Field([]any{"a", int64(1)}, 0, "1-0"); err == nil {
		t.Error("Field with an integer value: no error")
	}
}
