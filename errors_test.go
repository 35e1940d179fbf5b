package pelwarden

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The Lua ERRORS table and the Go errorCodes table must list the same codes.
func TestErrorCodesMatchLua(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("lua/pelwarden.lua")
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(src), "-- @@errors-begin")
	require.True(t, ok, "lua/pelwarden.lua lost its @@errors-begin marker")
	block, _, ok = strings.Cut(block, "-- @@errors-end")
	require.True(t, ok, "lua/pelwarden.lua lost its @@errors-end marker")
	re := regexp.MustCompile(`(?m)^\s*([A-Z]+)\s*=\s*'([A-Z]+)',`)
	lua := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(block, -1) {
		lua[m[2]] = true
	}
	require.NotEmpty(t, lua)
	goCodes := map[string]bool{}
	for c := range errorCodes {
		goCodes[c] = true
	}
	require.Equal(t, lua, goCodes, "lua/pelwarden.lua ERRORS and errors.go errorCodes drifted apart")

	// Codes are matched by prefix: none may be a prefix of another.
	for a := range goCodes {
		for b := range goCodes {
			if a != b {
				require.False(t, strings.HasPrefix(b, a), "code %s is a prefix of %s", a, b)
			}
		}
	}
	// Every code the Lua source raises is in the table.
	for _, m := range regexp.MustCompile(`ERRORS\.([A-Z]+)`).FindAllStringSubmatch(string(src), -1) {
		require.Contains(t, block, m[1]+" =", "ERRORS.%s is raised but not declared", m[1])
	}
}

func TestTranslate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reply string
		want  error
	}{
		{"PWNOGROUP no such consumer group", ErrNoGroup},
		{"PWWRONGTYPE key holds a hash", ErrWrongType},
		{"PWBADARG count must be between 1 and 10000", ErrInvalidArgument},
		{"PWBADID cursor must be a stream id", ErrInvalidID},
		{"PWBADID cursor must be a stream id", ErrInvalidArgument},
		{"PWSERVER XADD: OOM command not allowed", ErrServer},
		{"CROSSSLOT Keys in request don't hash to the same slot", ErrCrossSlot},
		{"NOGROUP No such key", ErrNoGroup},
		{"WRONGTYPE Operation against a key", ErrWrongType},
		{"ERR Function not found", ErrLibraryMissing},
		{"ERR something else", ErrServer},
		{"PWNOPERM pelwarden_v1_claim needs the xack command, which this ACL user may not run (grant +xack)", ErrNoPermission},
		{"NOPERM No permissions to access a key", ErrNoPermission},
	}
	for _, c := range cases {
		err := translate("f", nil, redisError(c.reply))
		require.ErrorIs(t, err, c.want, c.reply)
		var pe *Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "f", pe.Function)
	}
	// Non-reply errors keep their identity.
	err := translate("f", nil, context.DeadlineExceeded)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// A location suffix added by the server is dropped from the message.
	err = translate("f", nil, redisError("PWBADARG count is missing script: pelwarden_v1_claim, on @user_function:97."))
	require.Equal(t, "pelwarden: f: count is missing", err.Error())
	// An ACL refusal of the call names the call and its keys (the server's
	// text may not say which key) and keeps the server's text.
	err = translate("f", []string{"{o}", "{o}:dead"}, redisError("NOPERM No permissions to access a key"))
	require.ErrorIs(t, err, ErrNoPermission)
	require.Equal(t, "pelwarden: f: call on keys {o}, {o}:dead refused by the server's ACL: NOPERM No permissions to access a key", err.Error())
}

// redisError builds an error go-redis would return for an error reply.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

var _ redis.Error = redisError("")

// Arguments are checked before any round trip: the client points at a port
// nobody listens on, and every call fails with ErrInvalidArgument naming the
// argument, never with a connection error.
func TestArgumentsCheckedBeforeRoundTrip(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	lib := NewLibrary(rdb)
	ctx := context.Background()
	ok := ClaimArgs{MaxDeliveries: NoDeliveryLimit, Stream: "{s}", DeadLetterStream: "{s}:dead", Group: "g", Consumer: "c"}
	long := strings.Repeat("x", MaxNameBytes+1)
	cases := []struct {
		name string
		arg  string
		call func() error
	}{
		{"empty stream", "Stream", func() error { a := ok; a.Stream = ""; _, err := lib.Claim(ctx, a); return err }},
		{"long group", "Group", func() error { a := ok; a.Group = long; _, err := lib.Claim(ctx, a); return err }},
		{"negative count", "Count", func() error { a := ok; a.Count = -1; _, err := lib.Claim(ctx, a); return err }},
		{"huge count", "Count", func() error { a := ok; a.Count = MaxCount + 1; _, err := lib.Claim(ctx, a); return err }},
		{"negative min idle", "MinIdle", func() error { a := ok; a.MinIdle = -time.Second; _, err := lib.Claim(ctx, a); return err }},
		{"max deliveries below NoDeliveryLimit", "MaxDeliveries", func() error { a := ok; a.MaxDeliveries = -2; _, err := lib.Claim(ctx, a); return err }},
		{"dead-letter only without limit", "MaxDeliveries", func() error { a := ok; a.DeadLetterOnly = true; _, err := lib.Claim(ctx, a); return err }},
		{"negative backoff", "Backoff[1]", func() error {
			a := ok
			a.Backoff = []time.Duration{0, -1}
			_, err := lib.Claim(ctx, a)
			return err
		}},
		{"bad cursor", "Cursor", func() error { a := ok; a.Cursor = "abc"; _, err := lib.Claim(ctx, a); return err }},
		{"cursor overflow", "Cursor", func() error { a := ok; a.Cursor = "99999999999999999999-0"; _, err := lib.Claim(ctx, a); return err }},
		{"no ids", "IDs", func() error {
			_, err := lib.Ack(ctx, AckArgs{Stream: "s", Group: "g", Consumer: "c"})
			return err
		}},
		{"bad id", "IDs[1]", func() error {
			_, err := lib.Ack(ctx, AckArgs{Stream: "s", Group: "g", Consumer: "c", IDs: []string{"1-0", "1-x"}})
			return err
		}},
		{"too many ids", "IDs", func() error {
			_, err := lib.Extend(ctx, ExtendArgs{Stream: "s", Group: "g", Consumer: "c", IDs: make([]string, MaxCount+1)})
			return err
		}},
		{"long reason", "Reason", func() error {
			_, err := lib.DeadLetter(ctx, DeadLetterArgs{Stream: "s", DeadLetterStream: "d", Group: "g", Consumer: "c", IDs: []string{"1-0"}, Reason: strings.Repeat("r", 257)})
			return err
		}},
		{"zero reap idle", "Idle", func() error {
			_, err := lib.Reap(ctx, ReapArgs{Stream: "s", Group: "g"})
			return err
		}},
		{"empty keep", "Keep[0]", func() error {
			_, err := lib.Reap(ctx, ReapArgs{Stream: "s", Group: "g", Idle: time.Hour, Keep: []string{""}})
			return err
		}},
		{"redrive count", "Count", func() error {
			_, err := lib.Redrive(ctx, RedriveArgs{DeadLetterStream: "d", Stream: "s", Count: -5})
			return err
		}},
		{"trim stream", "Stream", func() error {
			_, err := lib.Trim(ctx, TrimArgs{})
			return err
		}},
		{"trim negative limit", "Limit", func() error {
			_, err := lib.Trim(ctx, TrimArgs{Stream: "s", Limit: -1})
			return err
		}},
		{"trim huge limit", "Limit", func() error {
			_, err := lib.Trim(ctx, TrimArgs{Stream: "s", Limit: MaxCount + 1, DryRun: true})
			return err
		}},
		{"stats group", "Group", func() error {
			_, err := lib.Stats(ctx, StatsArgs{Stream: "s", DeadLetterStream: "d"})
			return err
		}},
	}
	for _, c := range cases {
		err := c.call()
		require.Error(t, err, c.name)
		require.ErrorIs(t, err, ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), c.arg, c.name)
		var pe *Error
		require.True(t, errors.As(err, &pe), c.name)
	}
}

// A cluster client refuses keys in different slots before any round trip.
func TestCrossSlotCheckedOnClusterClient(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	lib := NewLibrary(rdb)
	_, err := lib.Claim(context.Background(), ClaimArgs{MaxDeliveries: NoDeliveryLimit, Stream: "{a}", DeadLetterStream: "{b}:dead", Group: "g", Consumer: "c"})
	require.ErrorIs(t, err, ErrCrossSlot)
	require.Contains(t, err.Error(), "hash tag")
}

func TestSlot(t *testing.T) {
	t.Parallel()
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	require.Equal(t, 12182, Slot("foo"))
	require.Equal(t, 12739, Slot("123456789"))
	require.Equal(t, Slot("{user1000}.following"), Slot("{user1000}.followers"))
	require.Equal(t, Slot("{orders}"), Slot(DeadLetterStreamFor("{orders}")))
	require.Equal(t, Slot("{}x"), int(crc16("{}x")%SlotCount), "empty tag hashes the whole key")
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, compareVersions("1.0.0", "1.0.0"))
	require.Equal(t, -1, compareVersions("1.0.0", "1.0.1"))
	require.Equal(t, 1, compareVersions("1.2.10", "1.2.9"))
	require.Equal(t, 1, compareVersions("2.0", "1.9.9"))
	require.Equal(t, -1, compareVersions("6.2.14", "7.0.0"))
	require.Equal(t, 0, compareVersions("7.0", "7.0.0"))
}

func TestTruncateError(t *testing.T) {
	t.Parallel()
	require.Equal(t, "short", TruncateError("short"))
	s := strings.Repeat("é", MaxErrorBytes) // 2 bytes each
	got := TruncateError(s)
	require.LessOrEqual(t, len(got), MaxErrorBytes)
	require.True(t, strings.HasSuffix(got, TruncatedMarker))
	require.True(t, strings.HasPrefix(s, strings.TrimSuffix(got, TruncatedMarker)))
	require.Len(t, TruncateError(strings.Repeat("a", MaxErrorBytes)), MaxErrorBytes)
}

func TestEmbeddedLibraryChecks(t *testing.T) {
	t.Parallel()
	require.NoError(t, checkLibrarySource(librarySource))
	require.Error(t, checkLibrarySource(strings.Replace(librarySource, "'"+LibraryVersion+"'", "'0.0.1'", 1)))
	require.Error(t, checkLibrarySource(strings.Replace(librarySource, "#!lua name=pelwarden", "#!lua name=other", 1)))
	require.Error(t, checkLibrarySource(strings.Replace(librarySource, registerMarker, "--", 1)))
	require.NotContains(t, evalSource, "#!lua")
	require.NotContains(t, evalSource, "register_function")
	// Every function the library registers is named by a Go constant, and
	// its table is part of the EVALSHA body, which the shim dispatches from.
	for _, fn := range []string{FunctionClaim, FunctionAck, FunctionDeadLetter, FunctionExtend, FunctionRelease, FunctionReap, FunctionRedrive, FunctionStats, FunctionVersion, FunctionTrim, FunctionTrimPlan, FunctionLease, FunctionLeaseRelease, FunctionLeaseNext, FunctionFail, FunctionGiveBack,
		FunctionLimitSet, FunctionLimitAcquire, FunctionLimitRelease, FunctionLimitShow} {
		require.Contains(t, librarySource, "name = '"+fn+"'")
		require.Contains(t, evalSource, "name = '"+fn+"'")
	}
	require.Contains(t, shimSource, "FUNCTIONS[i].name == ARGV[1]")
	require.Equal(t, 20, strings.Count(librarySource, "{name = 'pelwarden_v1_"))
}

// The limits and names the Lua library and the Go side both state must
// agree: each Lua constant against the Go constant of the same meaning.
func TestLuaConstantsMatchGo(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("lua/pelwarden.lua")
	require.NoError(t, err)
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = ('([^']*)'|([0-9]+))$`).FindAllStringSubmatch(string(src), -1) {
		lua[m[1]] = m[3] + m[4]
	}
	for name, want := range map[string]string{
		"LIBRARY_VERSION":       LibraryVersion,
		"MAX_COUNT":             strconv.Itoa(MaxCount),
		"MAX_ERROR_BYTES":       strconv.Itoa(MaxErrorBytes),
		"MAX_REASON_BYTES":      strconv.Itoa(MaxReasonBytes),
		"TRUNCATED_MARKER":      TruncatedMarker,
		"REASON_MAX_DELIVERIES": ReasonMaxDeliveries,
		"F_ORIGINAL_ID":         FieldOriginalID,
		"F_STREAM":              FieldStream,
		"F_GROUP":               FieldGroup,
		"F_CONSUMER":            FieldConsumer,
		"F_DELIVERIES":          FieldDeliveries,
		"F_REASON":              FieldReason,
		"F_ERROR":               FieldError,
		"F_TIME":                FieldDeadLetteredAt,
		"F_META_COUNT":          FieldMetaCount,
		"F_REDRIVES":            FieldRedrives,
	} {
		got, ok := lua[name]
		require.True(t, ok, "lua/pelwarden.lua no longer declares %s", name)
		require.Equal(t, want, got, "lua/pelwarden.lua %s and its Go constant drifted apart", name)
	}
}
