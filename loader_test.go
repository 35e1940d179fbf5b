package pelwarden

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply as go-redis returns it (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// fakeServer answers every command in a go-redis hook, never dialing: a
// server whose library is missing, on which FUNCTION LOAD and EVAL fail
// with the given errors (nil: succeed).
type fakeServer struct {
	functionLoad, eval error
	calls              []string
}

func (f *fakeServer) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("fake server: never dials")
	}
}

func (f *fakeServer) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToUpper(cmd.Name())
		if name == "FUNCTION" {
			name += " " + strings.ToUpper(cmd.Args()[1].(string))
		}
		f.calls = append(f.calls, name)
		var err error
		switch name {
		case "INFO":
			cmd.(*redis.StringCmd).SetVal("# Server\r\nredis_version:7.2.4\r\n")
		case "FCALL", "FCALL_RO":
			err = replyError("ERR Function not found")
		case "FUNCTION LOAD":
			err = f.functionLoad
		case "EVAL":
			err = f.eval
		default:
			err = errors.New("fake server: unexpected " + name)
		}
		if err != nil {
			cmd.SetErr(err)
		}
		return err
	}
}

func (f *fakeServer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A self-heal load that fails because the connection did (refused, reset,
// timed out) or because the server asks to retry later (LOADING after a
// restart, BUSY) says nothing about what the server supports: the error
// must be transient, not ErrServerUnsupported, which the driver treats as
// permanent and stops on. The chaos suite found a consumer stopped that way
// by a FUNCTION FLUSH followed by a cut connection.
func TestLoadFailureClassification(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name               string
		functionLoad, eval error
		unsupported        bool
		noPermission       bool // the ACL refused both: the error says to load the library with a user allowed to
	}{
		{"connection refused", refused, refused, false, false},
		{"connection reset", io.EOF, io.EOF, false, false},
		{"deadline", context.DeadlineExceeded, nil, false, false},
		{"loading after a restart", replyError("LOADING Redis is loading the dataset in memory"), replyError("LOADING Redis is loading the dataset in memory"), false, false},
		{"busy script", replyError("BUSY Redis is busy running a script"), replyError("BUSY Redis is busy running a script"), false, false},
		{"refused, then the connection dropped", replyError("ERR Error registering functions"), io.EOF, false, false},
		{"NOPERM, then the connection dropped", replyError("NOPERM this user has no permissions to run the 'function|load' command"), refused, false, false},
		{"refused, EVAL works", replyError("ERR Error registering functions"), nil, false, false},
		{"no Lua at all", replyError("ERR unknown command 'FUNCTION'"), replyError("ERR unknown command 'EVAL'"), true, false},
		{"NOPERM for both", replyError("NOPERM no permissions to run 'function|load'"), replyError("NOPERM no permissions to run 'eval'"), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakeServer{functionLoad: c.functionLoad, eval: c.eval}
			rdb := redis.NewClient(&redis.Options{Addr: "fake:6379", MaxRetries: -1})
			defer rdb.Close()
			rdb.AddHook(fake)
			lib := NewLibrary(rdb)

			_, err := lib.Load(context.Background())
			if err == nil {
				t.Fatalf("Load succeeded; calls %v", fake.calls)
			}
			if got := errors.Is(err, ErrServerUnsupported); got != c.unsupported {
				t.Fatalf("errors.Is(err, ErrServerUnsupported) = %v, want %v; err: %v; calls %v", got, c.unsupported, err, fake.calls)
			}
			if got := errors.Is(err, ErrNoPermission); got != c.noPermission {
				t.Fatalf("errors.Is(err, ErrNoPermission) = %v, want %v; err: %v", got, c.noPermission, err)
			}
			// The same through a function call's self-heal.
			_, err = lib.Ack(context.Background(), AckArgs{Stream: "s", Group: "g", Consumer: "c", IDs: []string{"1-1"}})
			if err == nil {
				t.Fatal("Ack succeeded")
			}
			if got := errors.Is(err, ErrServerUnsupported); got != c.unsupported {
				t.Fatalf("Ack: errors.Is(err, ErrServerUnsupported) = %v, want %v; err: %v", got, c.unsupported, err)
			}
			if got := errors.Is(err, ErrNoPermission); got != c.noPermission {
				t.Fatalf("Ack: errors.Is(err, ErrNoPermission) = %v, want %v; err: %v", got, c.noPermission, err)
			}
			if !errors.Is(err, ErrLibraryMissing) {
				t.Fatalf("Ack: %v does not match ErrLibraryMissing", err)
			}
			if !c.unsupported && c.functionLoad == refused && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Ack: the connection error is not in the chain: %v", err)
			}
		})
	}
}

// loadAction: the one rule for what Load reports.
func TestLoadAction(t *testing.T) {
	t.Parallel()
	newer := "999.0.0"
	for _, c := range []struct {
		before, after string
		loaded        bool
		want          LoadAction
	}{
		{LibraryVersion, LibraryVersion, false, ActionCurrent},
		{newer, newer, false, ActionKeptNewer},
		{"", LibraryVersion, true, ActionLoaded},
		{"0.0.1", LibraryVersion, true, ActionUpgraded},
		{"", newer, true, ActionKeptNewer},
	} {
		if got := loadAction(c.before, c.after, c.loaded); got != c.want {
			t.Errorf("loadAction(%q, %q, %v) = %s, want %s", c.before, c.after, c.loaded, got, c.want)
		}
	}
}
