// Package resp takes apart the XREADGROUP replies that go-redis returns
// untyped (through Do or inside a transaction), for the root package's
// LeaseNextRead and the driver's reads. go-redis's own XMessage keeps the
// fields in a map, which loses their order and duplicate names; these
// keep both.
package resp

import "fmt"

// ReadEntries returns the entries of an XREADGROUP reply of one stream,
// RESP2 [[stream, entries]] or RESP3 {stream: entries} (nil when the read
// found nothing), and how many fields they hold in all, so the caller
// makes one allocation for every entry's fields.
func ReadEntries(v any) (entries []any, fields int, err error) {
	var list any
	switch r := v.(type) {
	case nil:
		return nil, 0, nil
	case map[any]any:
		for _, e := range r {
			list = e
		}
	case map[string]any:
		for _, e := range r {
			list = e
		}
	case []any:
		if len(r) == 0 {
			return nil, 0, nil
		}
		s, ok := r[0].([]any)
		if !ok || len(s) < 2 {
			return nil, 0, fmt.Errorf("XREADGROUP: unexpected stream element %T", r[0])
		}
		list = s[1]
	default:
		return nil, 0, fmt.Errorf("XREADGROUP: unexpected reply %T", v)
	}
	entries, ok := list.([]any)
	if !ok {
		return nil, 0, fmt.Errorf("XREADGROUP: unexpected entries %T", list)
	}
	for _, e := range entries {
		if pair, ok := e.([]any); ok && len(pair) >= 2 {
			if flat, ok := pair[1].([]any); ok {
				fields += len(flat) / 2
			}
		}
	}
	return entries, fields, nil
}

// Entry takes one element of ReadEntries apart: the entry's id, its fields
// as a flat name, value list (of even length; see Field), and the elements
// after the fields (XREADGROUP ... CLAIM adds the idle time and the number
// of deliveries before this one).
func Entry(e any) (id string, flat, extra []any, err error) {
	pair, ok := e.([]any)
	if !ok || len(pair) < 2 {
		return "", nil, nil, fmt.Errorf("XREADGROUP: unexpected entry %T", e)
	}
	id, ok = String(pair[0])
	if !ok {
		return "", nil, nil, fmt.Errorf("XREADGROUP: unexpected id %T", pair[0])
	}
	flat, ok = pair[1].([]any)
	if !ok || len(flat)%2 != 0 {
		return "", nil, nil, fmt.Errorf("XREADGROUP: unexpected fields of %s", id)
	}
	return id, flat, pair[2:], nil
}

// Field returns the j-th field of flat (from Entry), or an error naming
// the entry id when its name or value is not a string.
func Field(flat []any, j int, id string) (name, value string, err error) {
	name, ok1 := String(flat[2*j])
	value, ok2 := String(flat[2*j+1])
	if !ok1 || !ok2 {
		return "", "", fmt.Errorf("XREADGROUP: non-string field in %s", id)
	}
	return name, value, nil
}

// String is a bulk string element, as go-redis gives it (string) or as a
// []byte.
func String(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}
