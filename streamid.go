package pelwarden

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// StreamID is a stream entry id: milliseconds and a sequence number,
// written "1700000000000-0".
type StreamID struct {
	Ms, Seq uint64
}

// ParseID parses a full stream id, "<ms>-<seq>", both decimal numbers that
// fit in a uint64 (what XADD returns; not "0", "$", "-", "+" nor a bare
// millisecond time). The error matches ErrInvalidID. It is the one stream
// id parser of the library, the driver, the CLI and the test kit.
func ParseID(s string) (StreamID, error) {
	if !validID(s) {
		return StreamID{}, &Error{Message: fmt.Sprintf("must be a stream id like 1700000000000-0, got %q", clip(s)), Kind: ErrInvalidID}
	}
	ms, seq, _ := strings.Cut(s, "-")
	// validID accepted both parts: they parse.
	m, _ := strconv.ParseUint(ms, 10, 64)
	q, _ := strconv.ParseUint(seq, 10, 64)
	return StreamID{Ms: m, Seq: q}, nil
}

// String returns the id as the server writes it, "1700000000000-0".
func (id StreamID) String() string {
	return strconv.FormatUint(id.Ms, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// CompareIDs orders two stream ids as their stream does, returning -1, 0
// or +1 (for sorting ids the server gave, as strings). An id that does not
// parse sorts before every one that does; two such compare as strings.
func CompareIDs(a, b string) int {
	x, errA := ParseID(a)
	y, errB := ParseID(b)
	switch {
	case errA != nil && errB != nil:
		return strings.Compare(a, b)
	case errA != nil:
		return -1
	case errB != nil:
		return 1
	}
	return x.Compare(y)
}

// Compare returns -1, 0 or +1 as id is before, equal to or after o in a
// stream.
func (id StreamID) Compare(o StreamID) int {
	if c := cmp.Compare(id.Ms, o.Ms); c != 0 {
		return c
	}
	return cmp.Compare(id.Seq, o.Seq)
}
