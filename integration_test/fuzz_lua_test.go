package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
)

// fuzzFunctions is the library's function list, in a fixed order: the fuzz
// input picks one by index.
var fuzzFunctions = []string{
	pelwarden.FunctionClaim, pelwarden.FunctionAck, pelwarden.FunctionDeadLetter,
	pelwarden.FunctionExtend, pelwarden.FunctionRelease, pelwarden.FunctionReap,
	pelwarden.FunctionRedrive, pelwarden.FunctionStats, pelwarden.FunctionVersion,
	pelwarden.FunctionTrim, pelwarden.FunctionTrimPlan,
	pelwarden.FunctionLease, pelwarden.FunctionLeaseRelease, pelwarden.FunctionLeaseNext,
	pelwarden.FunctionLimitSet, pelwarden.FunctionLimitAcquire, pelwarden.FunctionLimitRelease, pelwarden.FunctionLimitShow,
}

// fuzzCodes are the library's error codes: the only errors allowed back.
var fuzzCodes = []string{"PWNOGROUP", "PWWRONGTYPE", "PWBADARG", "PWBADID", "PWSERVER", "PWNOLIMIT"}

// fuzzFixture is one iteration's keys and entries on the server.
type fuzzFixture struct {
	stream, dlq, missing, wrong string
	ids                         []string // ids[0] is deleted from the stream while pending
}

// fuzzKey picks a key of the fixture: the stream, its dead-letter stream,
// a missing key and a string key, all under one hash tag.
func (x *fuzzFixture) key(i byte) string {
	return []string{x.stream, x.dlq, x.missing, x.wrong}[int(i)%4]
}

const fuzzRaw = 0xff // selector of the fuzzer's own raw string

// fuzzArg maps one selector byte to an argument: "interesting" values plus
// the fixture's own names and ids.
func (x *fuzzFixture) arg(sel byte, raw string) string {
	pool := []string{
		"", "0", "-1", "1", "2", "10", "abc", "0-0", "1-0", "99999999999999999999-0",
		"18446744073709551615-18446744073709551615", "18446744073709551616-0", "9007199254740993",
		"9999999999999999999999", "1e5", "1.5", "(1-0", "+", "-", "$", ">", "\x00", "a\x00b", "\xff\xfe",
		"g", "a", "b", "handler", "10000", "10001", "007", " 1", "0x10", "nan", "inf",
		x.stream, x.dlq, x.missing, x.wrong, pelwarden.FieldMetaCount,
	}
	if sel == fuzzRaw {
		return raw
	}
	if n := int(sel) - len(pool); n >= 0 {
		return x.ids[n%len(x.ids)]
	}
	return pool[sel]
}

var fuzzSeq atomic.Int64

// newFuzzFixture makes a stream with 5 entries and group "g": 4 delivered
// to consumer "a" (the first of them then deleted from the stream), one
// never delivered; a dead-letter stream holding one foreign entry; and a
// string key.
func newFuzzFixture(ctx context.Context, rdb *redis.Client) (*fuzzFixture, error) {
	tag := fmt.Sprintf("{fuzz.%d.%d}", time.Now().UnixNano(), fuzzSeq.Add(1))
	x := &fuzzFixture{stream: tag, dlq: tag + ":dead", missing: tag + ":missing", wrong: tag + ":str"}
	if err := rdb.XGroupCreateMkStream(ctx, x.stream, "g", "$").Err(); err != nil {
		return nil, err
	}
	for i := 0; i < 5; i++ {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: x.stream, Values: []string{"n", fmt.Sprint(i), "bin", "\x00\xff"}}).Result()
		if err != nil {
			return nil, err
		}
		x.ids = append(x.ids, id)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{x.stream, ">"}, Count: 4, Block: -1}).Err(); err != nil {
		return nil, err
	}
	if err := rdb.XDel(ctx, x.stream, x.ids[0]).Err(); err != nil {
		return nil, err
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: x.dlq, Values: []string{"foreign", "1", pelwarden.FieldMetaCount, "nan"}}).Err(); err != nil {
		return nil, err
	}
	return x, rdb.Set(ctx, x.wrong, "x", 0).Err()
}

// FuzzLibrary calls the Lua functions through raw FCALL with random KEYS and
// ARGV on the first server of the matrix. Every error must carry one of the
// library's codes, never a raw Lua or server error, and afterwards no entry
// is lost (each is still in a stream under the tag, or was acked by this
// very call) and the PEL names only entries that exist (or the one deleted
// on purpose).
//
// CI runs the seeds; `make fuzz-lua` runs the fuzzer.
func FuzzLibrary(f *testing.F) {
	// Seeds: every function with valid arguments. Selectors: index into the
	// pool of fuzzArg; 40.. are the fixture's ids (40 = the deleted one).
	const (
		sEmpty, sZero, sOne, sTwo, sTen = 0, 1, 3, 4, 5
		sZeroID                         = 7
		sG, sA, sB, sHandler            = 24, 25, 26, 27
		id1, id2, id3                   = 41, 42, 43
	)
	f.Add(uint8(0), []byte{0, 1}, []byte{sG, sB, sZero, sZeroID, sTen, sTwo, sZero, sOne, sZero}, "")       // claim
	f.Add(uint8(0), []byte{0, 1}, []byte{sG, sB, sZero, sZeroID, sTen, sOne, sOne, sZero, sTen, sTen}, "")  // claim, dead-letter only, backoff
	f.Add(uint8(1), []byte{0}, []byte{sG, sA, sOne, id1, id2, 40}, "")                                      // ack
	f.Add(uint8(2), []byte{0, 1}, []byte{sG, sA, sZero, sHandler, fuzzRaw, id1, 40}, "boom \x00")           // deadletter
	f.Add(uint8(3), []byte{0}, []byte{sG, sA, id1, id3}, "")                                                // extend
	f.Add(uint8(4), []byte{0}, []byte{sG, sA, sTen, sOne, id2}, "")                                         // release
	f.Add(uint8(5), []byte{0}, []byte{sG, sZero, sA}, "")                                                   // reap
	f.Add(uint8(6), []byte{1, 0}, []byte{sZeroID, sTen, sOne}, "")                                          // redrive
	f.Add(uint8(7), []byte{0, 1}, []byte{sG}, "")                                                           // stats
	f.Add(uint8(8), []byte{}, []byte{}, "")                                                                 // version
	f.Add(uint8(6), []byte{1, 0}, []byte{fuzzRaw, sTen, sOne}, "18446744073709551615-18446744073709551615") // redrive, last cursor
	f.Add(uint8(2), []byte{0, 1}, []byte{sG, sA, sOne, sHandler, sEmpty, id1, id1}, "")                     // deadletter twice

	f.Fuzz(func(t *testing.T, fnSel uint8, keySel []byte, argSel []byte, raw string) {
		if len(keySel) > 3 || len(argSel) > 24 {
			t.Skip()
		}
		s := servers[0]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		x, err := newFuzzFixture(ctx, s.rdb)
		require.NoError(t, err)
		defer s.rdb.Del(context.Background(), x.stream, x.dlq, x.missing, x.wrong)

		fn := fuzzFunctions[int(fnSel)%len(fuzzFunctions)]
		var ks []string
		for _, b := range keySel {
			ks = append(ks, x.key(b))
		}
		args := make([]any, 0, len(argSel))
		for _, b := range argSel {
			args = append(args, x.arg(b, raw))
		}
		res, callErr := s.rdb.FCall(ctx, fn, ks, args...).Result()
		if callErr != nil {
			var rerr redis.Error
			require.True(t, errors.As(callErr, &rerr), "%s %q %q: not a server reply: %v", fn, ks, args, callErr)
			code, _, _ := strings.Cut(callErr.Error(), " ")
			require.Contains(t, fuzzCodes, code, "%s %q %q: raw error: %v", fn, ks, args, callErr)
			require.NotEqual(t, "PWSERVER", code, "%s %q %q: the library let the server refuse a command: %v", fn, ks, args, callErr)
		}

		// Nothing lost: entries 1..4 are each in some stream under the tag
		// (their field n identifies them through dead-letter and redrive),
		// unless this call acked them.
		found := map[string]bool{}
		for _, k := range []string{x.stream, x.dlq, x.missing} {
			if s.rdb.Type(ctx, k).Val() != "stream" {
				continue
			}
			es, err := s.rdb.Do(ctx, "XRANGE", k, "-", "+").Slice()
			require.NoError(t, err)
			for _, e := range es {
				fs := e.([]any)[1].([]any)
				for i := 0; i+1 < len(fs); i += 2 {
					if fs[i] == "n" {
						found[fs[i+1].(string)] = true
					}
				}
			}
		}
		var acked map[string]bool
		if fn == pelwarden.FunctionAck && callErr == nil && len(args) > 3 {
			acked = map[string]bool{}
			for _, a := range args[3:] {
				acked[a.(string)] = true
			}
		}
		for i := 1; i < len(x.ids); i++ {
			if !found[fmt.Sprint(i)] && !acked[x.ids[i]] {
				t.Fatalf("%s %q %q (reply %v): entry %s (n=%d) lost", fn, ks, args, res, x.ids[i], i)
			}
		}
		// The PEL names only entries in the stream, or the one deleted on
		// purpose.
		if s.rdb.Type(ctx, x.stream).Val() == "stream" {
			inStream := map[string]bool{x.ids[0]: true}
			es, err := s.rdb.XRange(ctx, x.stream, "-", "+").Result()
			require.NoError(t, err)
			for _, e := range es {
				inStream[e.ID] = true
			}
			groups, err := s.rdb.XInfoGroups(ctx, x.stream).Result()
			require.NoError(t, err)
			for _, g := range groups {
				p, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: x.stream, Group: g.Name, Start: "-", End: "+", Count: 1000}).Result()
				require.NoError(t, err)
				for _, e := range p {
					require.True(t, inStream[e.ID], "%s %q %q: PEL holds %s, not in the stream", fn, ks, args, e.ID)
				}
			}
		}
	})
}
