package pelwarden

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeClaim(t *testing.T) {
	t.Parallel()
	v := []any{"5-0",
		[]any{[]any{"1-0", []any{"a", "1", "b", "2"}, int64(2)}},
		[]any{"2-0"}, []any{"3-0"}, int64(4), []any{"6-0"}, []any{"w1", int64(1), "w2", "3"}, "a future field"}
	p, err := decodeClaim(v)
	require.NoError(t, err)
	require.Equal(t, &ClaimPage{
		Cursor:       "5-0",
		Entries:      []Entry{{ID: "1-0", Fields: []Field{{"a", "1"}, {"b", "2"}}, Deliveries: 2}},
		DeadLettered: []string{"2-0"},
		Deleted:      []string{"3-0"},
		BackedOff:    4,
		TooLarge:     []string{"6-0"},
		TakenFrom:    []ConsumerCount{{Consumer: "w1", Entries: 1}, {Consumer: "w2", Entries: 3}},
	}, p)
	require.False(t, p.Done())
	// A library before 1.4.0 replies without taken-from.
	p, err = decodeClaim(v[:6])
	require.NoError(t, err)
	require.Nil(t, p.TakenFrom)

	for _, bad := range []any{
		nil, "x", []any{}, []any{"0-0", []any{}, []any{}, []any{}},
		[]any{int64(1), []any{}, []any{}, []any{}, int64(0)},
		[]any{"0-0", []any{[]any{"1-0", []any{"a"}, int64(1)}}, []any{}, []any{}, int64(0)},
		[]any{"0-0", []any{[]any{"1-0", []any{"a", "b"}, "x"}}, []any{}, []any{}, int64(0)},
		[]any{"0-0", []any{}, []any{int64(3)}, []any{}, int64(0)},
		[]any{"0-0", []any{}, []any{}, []any{}, int64(0), []any{}, []any{"w1"}},
		[]any{"0-0", []any{}, []any{}, []any{}, int64(0), []any{}, []any{"w1", "x"}},
		[]any{"0-0", []any{}, []any{}, []any{}, int64(0), []any{}, "w1"},
	} {
		_, err := decodeClaim(bad)
		require.ErrorIs(t, err, ErrMalformedReply, "%#v", bad)
	}
}

func TestDecodeStats(t *testing.T) {
	t.Parallel()
	v := []any{"pending", int64(3), "lowest", "1-0", "highest", "3-0",
		"consumers", []any{[]any{"a", int64(3), int64(1500)}},
		"lag", int64(-1), "entries-read", int64(7), "last-delivered", "3-0",
		"length", int64(9), "dead-letter-length", int64(2), "unknown-later", "ignored"}
	s, err := decodeStats(v)
	require.NoError(t, err)
	require.EqualValues(t, 3, s.Pending)
	require.EqualValues(t, -1, s.Lag)
	require.Equal(t, []ConsumerStats{{Name: "a", Pending: 3, Idle: 1500 * 1e6}}, s.Consumers)
	_, err = decodeStats([]any{"pending", int64(1)})
	require.ErrorIs(t, err, ErrMalformedReply)
	_, err = decodeStats([]any{"pending"})
	require.ErrorIs(t, err, ErrMalformedReply)
}

// FuzzDecode feeds every decoder arbitrary reply trees built from the fuzz
// input: each must return a value or ErrMalformedReply, and never panic.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x03a\x05\x02\x03\x01\x03b\x02\x05\x00\x05\x00\x02"))
	f.Add([]byte("\x05\x02\x02\x05\x01\x03x"))
	f.Add([]byte("\x05\x04\x03a\x05\x02\x03b\x03c\x05\x00\x05\x00"))
	f.Add([]byte("\x05\x12\x03pending\x02\x03consumers\x05\x01\x05\x03\x03a\x02\x02\x03length\x02"))
	decoders := []func(any) (any, error){
		func(v any) (any, error) { return decodeClaim(v) },
		func(v any) (any, error) { return decodeAck(v) },
		func(v any) (any, error) { return decodeDeadLetter(v) },
		func(v any) (any, error) { return decodeExtend(v) },
		func(v any) (any, error) { return decodeReap(v) },
		func(v any) (any, error) { return decodeRedrive(v) },
		func(v any) (any, error) { return decodeStats(v) },
		func(v any) (any, error) { return decodeTrim(v) },
		func(v any) (any, error) { return decodeLease(v) },
		func(v any) (any, error) { return decodeLeaseRelease(v) },
		func(v any) (any, error) { return decodeLeaseNext(v) },
		func(v any) (any, error) { return decodeReadEntries(v) },
		func(v any) (any, error) { return decodeLimitShow(FunctionLimitShow, "l", v) },
		func(v any) (any, error) { return decodeLimitAcquire(v) },
		func(v any) (any, error) { return decodeLimitRelease(v) },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &treeBuilder{data: data}
		v := b.value(0)
		for _, dec := range decoders {
			_, err := dec(v)
			if err != nil && !errors.Is(err, ErrMalformedReply) {
				t.Fatalf("decoder returned %v, not ErrMalformedReply", err)
			}
		}
	})
}

// treeBuilder turns bytes into a reply tree: a tag byte picks nil, an
// integer, a string or an array; the following bytes give its content.
type treeBuilder struct {
	data []byte
	pos  int
}

func (b *treeBuilder) next() byte {
	if b.pos >= len(b.data) {
		return 0
	}
	c := b.data[b.pos]
	b.pos++
	return c
}

func (b *treeBuilder) value(depth int) any {
	switch b.next() % 6 {
	case 0, 1:
		return nil
	case 2:
		return int64(int8(b.next()))
	case 3:
		n := int(b.next() % 16)
		s := make([]byte, 0, n)
		for range n {
			s = append(s, b.next())
		}
		// Short strings that look like reply keywords reach deeper paths.
		words := []string{"pending", "consumers", "length", "dead-letter-length", "lowest", "lag", "0-0", "1-0"}
		if n > 0 && s[0] < 32 {
			return words[int(s[0])%len(words)]
		}
		return string(s)
	case 4:
		return []byte{b.next()}
	default:
		if depth > 6 {
			return nil
		}
		n := int(b.next() % 20)
		a := make([]any, 0, n)
		for range n {
			a = append(a, b.value(depth+1))
		}
		return a
	}
}
