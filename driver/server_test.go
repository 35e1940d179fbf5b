package driver

import (
	"context"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// An XACK's ids go to go-redis by pointer (ackArg): what it writes is the
// id's bytes, and a printed command (errors, tracing hooks) shows the ids,
// not pointers. TestFakeAgreesWithServer acks through it on real servers.
func TestAckArgReadsAsTheID(t *testing.T) {
	t.Parallel()
	ids := []string{"1-0", "1712345678901-25"}
	cmd := redis.NewIntCmd(context.Background(), "xack", "s", "g", (*ackArg)(&ids[0]), (*ackArg)(&ids[1]))
	require.Equal(t, "xack s g 1-0 1712345678901-25: 0", cmd.String())
	b, err := (*ackArg)(&ids[1]).MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, []byte("1712345678901-25"), b)
}

// A reply buffer appends what go-redis copies into it: a string through
// io.CopyN (a LimitedReader, read in as many calls as its source needs),
// or a reader to its end; a read error is returned with what came before.
func TestReplyBufferReadFrom(t *testing.T) {
	t.Parallel()
	data := strings.Repeat("0123456789", 300) // 3,000 bytes: beyond one 512-byte step
	for _, tc := range []struct {
		name string
		src  func() io.Reader
		want string
	}{
		{"limited, whole", func() io.Reader { return io.LimitReader(strings.NewReader(data+"tail"), 3000) }, data},
		{"limited, byte by byte", func() io.Reader { return io.LimitReader(iotest.OneByteReader(strings.NewReader(data+"tail")), 3000) }, data},
		{"limited, empty", func() io.Reader { return io.LimitReader(strings.NewReader(data), 0) }, ""},
		{"to the end", func() io.Reader { return iotest.HalfReader(strings.NewReader(data)) }, data},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := replyBuffer{b: []byte("head:")}
			n, err := io.Copy(&r, tc.src())
			require.NoError(t, err)
			require.Equal(t, int64(len(tc.want)), n)
			require.Equal(t, "head:"+tc.want, string(r.b))
		})
	}
	t.Run("error", func(t *testing.T) {
		t.Parallel()
		r := replyBuffer{}
		src := io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(io.ErrUnexpectedEOF))
		n, err := r.ReadFrom(io.LimitReader(src, 10))
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.Equal(t, int64(3), n)
		require.Equal(t, "abc", string(r.b))
	})
}
