package pelwarden

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Mode is how the library's functions are invoked on the server.
type Mode int32

const (
	// ModeUnknown: Load has not run yet. Calls then try FCALL and load the
	// library on first use.
	ModeUnknown Mode = iota
	// ModeFunction: the library is loaded with FUNCTION LOAD and called with
	// FCALL. The normal mode.
	ModeFunction
	// ModeEval: the server refuses the FUNCTION command (an ACL user without
	// +function, or a provider that blocks it), so the same Lua source runs
	// through EVALSHA behind a small dispatch shim.
	ModeEval
)

func (m Mode) String() string {
	switch m {
	case ModeFunction:
		return "function"
	case ModeEval:
		return "evalsha"
	default:
		return "unknown"
	}
}

// LoadAction says what Load did on one server.
type LoadAction string

const (
	// ActionLoaded: the library was not there and was loaded.
	ActionLoaded LoadAction = "loaded"
	// ActionUpgraded: an older version was replaced.
	ActionUpgraded LoadAction = "upgraded"
	// ActionCurrent: the same version was already there.
	ActionCurrent LoadAction = "current"
	// ActionKeptNewer: a newer version was there and was kept (never
	// downgraded; its versioned function names keep this caller working).
	ActionKeptNewer LoadAction = "kept-newer"
	// ActionEval: FUNCTION is refused; the library runs through EVALSHA.
	ActionEval LoadAction = "evalsha"
)

// NodeLoad is the outcome of Load on one server (one primary of a cluster).
type NodeLoad struct {
	// Addr is the server's address.
	Addr string
	// Before is the library version found before loading, "" when absent.
	Before string
	// After is the version on the server after loading ("" in ModeEval when
	// the library is not loaded there).
	After string
	// Action says what was done.
	Action LoadAction
}

// LoadResult is the outcome of Load.
type LoadResult struct {
	// Mode is how calls reach the library from now on.
	Mode Mode
	// Nodes has one element per server: one for a single server, one per
	// primary for a cluster.
	Nodes []NodeLoad
}

// Library calls the pelwarden functions on one Redis deployment. It is safe
// for concurrent use. Create it with NewLibrary; it never closes the client.
//
// Every call self-heals: when the server answers "Function not found"
// (restart without persistence, FUNCTION FLUSH, a new empty cluster node),
// the library is loaded again and the call retried once, invisibly.
type Library struct {
	rdb    redis.UniversalClient
	mode   atomic.Int32
	script *redis.Script

	loadMu sync.Mutex // serialises self-heal loads of one Library
}

// NewLibrary returns a Library for rdb: a *redis.Client, *redis.ClusterClient,
// failover client or *redis.Ring. It does no I/O; call Load, or let the first
// call load the library.
func NewLibrary(rdb redis.UniversalClient) *Library {
	return &Library{rdb: rdb, script: redis.NewScript(evalSource)}
}

// Load loads the embedded library on the server behind rdb. It is a shortcut
// for NewLibrary(rdb).Load(ctx).
func Load(ctx context.Context, rdb redis.UniversalClient) (*LoadResult, error) {
	return NewLibrary(rdb).Load(ctx)
}

// Mode reports how calls currently reach the library.
func (l *Library) Mode() Mode { return Mode(l.mode.Load()) }

// Load loads the embedded library on every primary behind the client:
//   - absent: FUNCTION LOAD;
//   - an older version: FUNCTION LOAD REPLACE;
//   - the same or a newer version: nothing (never a downgrade).
//
// It then verifies each primary answers with the expected version. Any number
// of processes may call Load at once; all succeed. On a Redis Cluster it
// visits every primary itself. When the library is current, Load runs one
// FCALL_RO and nothing else. When the FUNCTION command is refused (NOPERM),
// Load keeps a library an administrator loaded, or else switches to
// ModeEval and reports it; a user refused that too gets an error matching
// ErrLibraryMissing and ErrNoPermission. A server older than 7.0, with Lua
// disabled, or refusing all scripting, gives an error matching
// ErrServerUnsupported.
func (l *Library) Load(ctx context.Context) (*LoadResult, error) {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	return l.loadLocked(ctx)
}

func (l *Library) loadLocked(ctx context.Context) (*LoadResult, error) {
	var (
		mu  sync.Mutex
		res = &LoadResult{}
	)
	visit := func(ctx context.Context, c *redis.Client) error {
		n, err := loadNode(ctx, c)
		if err != nil {
			return fmt.Errorf("pelwarden: load on %s: %w", c.Options().Addr, err)
		}
		mu.Lock()
		res.Nodes = append(res.Nodes, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := l.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, visit)
	case *redis.Ring:
		err = c.ForEachShard(ctx, visit)
	case *redis.Client:
		err = visit(ctx, c)
	default:
		// Other UniversalClient implementations: one logical server.
		var n NodeLoad
		n, err = loadNode(ctx, l.rdb)
		if err == nil {
			res.Nodes = append(res.Nodes, n)
		} else {
			err = fmt.Errorf("pelwarden: load: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	res.Mode = ModeFunction
	for _, n := range res.Nodes {
		if n.Action == ActionEval {
			res.Mode = ModeEval
		}
	}
	if res.Mode == ModeEval {
		if err := l.script.Load(ctx, l.rdb).Err(); err != nil && !isNoPermission(err) {
			return nil, fmt.Errorf("pelwarden: load: SCRIPT LOAD: %w", err)
		}
	}
	l.mode.Store(int32(res.Mode))
	return res, nil
}

// loadNode loads the library on one server and verifies it.
func loadNode(ctx context.Context, c redis.Cmdable) (NodeLoad, error) {
	n := NodeLoad{}
	if o, ok := c.(interface{ Options() *redis.Options }); ok {
		n.Addr = o.Options().Addr
	}
	// Usually the library is there already: one read-only call then does,
	// and a consumer's ACL user needs no FUNCTION LOAD.
	v, err := serverLibraryVersion(ctx, c)
	switch {
	case err == nil && v != "" && compareVersions(v, LibraryVersion) >= 0:
		n.Before, n.After, n.Action = v, v, loadAction(v, v, false)
		return n, nil
	case err != nil && !isNoPermission(err):
		// FCALL_RO unknown: say why when the server is too old. Other
		// errors (connection, credentials) are returned as they are.
		if verr := checkServerVersion(ctx, c); errors.Is(verr, ErrServerUnsupported) {
			return n, verr
		}
		return n, err
	}
	for attempt := 0; ; attempt++ {
		before, err := serverLibraryVersion(ctx, c)
		if err != nil {
			if isNoPermission(err) {
				return evalFallback(ctx, c, n, err)
			}
			return n, err
		}
		if attempt == 0 {
			n.Before = before
		}
		if before != "" && compareVersions(before, LibraryVersion) >= 0 {
			n.After = before
			if attempt > 0 {
				// Another process loaded it while we were trying: reported
				// as loaded (or kept-newer).
				n.Action = loadAction("", before, true)
			} else {
				n.Action = loadAction(before, before, false)
			}
			return n, nil
		}
		if attempt >= 5 {
			return n, fmt.Errorf("%w: library still at version %q after %d attempts", ErrLibraryMissing, before, attempt)
		}
		var cmd *redis.StringCmd
		if before == "" {
			cmd = c.FunctionLoad(ctx, librarySource)
		} else {
			cmd = c.FunctionLoadReplace(ctx, librarySource)
		}
		err = cmd.Err()
		switch {
		case err == nil:
			after, verr := serverLibraryVersion(ctx, c)
			if verr != nil {
				return n, fmt.Errorf("verify after FUNCTION LOAD: %w", verr)
			}
			if after == "" {
				// Flushed between load and verify: go round again.
				continue
			}
			n.After = after
			n.Action = loadAction(before, after, true)
			return n, nil
		case isNoPermission(err):
			return evalFallback(ctx, c, n, err)
		case isLibraryExists(err) && before == "":
			// "Library 'pelwarden' already exists": a concurrent Load won
			// the race. Read the version again.
			continue
		case transient(err):
			// No answer (connection lost, timeout) or "try again later"
			// (LOADING, BUSY...): nothing learnt about the server.
			return n, fmt.Errorf("FUNCTION LOAD: %w", err)
		default:
			// FUNCTION exists (checked above) but refuses to load: Lua may be
			// disabled, or the engine missing. EVAL would fail the same way.
			evalErr := c.Eval(ctx, "return 1", nil).Err()
			switch {
			case evalErr == nil:
				return n, fmt.Errorf("%w: FUNCTION LOAD failed: %v", ErrLibraryMissing, err)
			case transient(evalErr):
				return n, fmt.Errorf("FUNCTION LOAD failed (%v), then EVAL: %w", err, evalErr)
			}
			return n, fmt.Errorf("%w: FUNCTION LOAD failed (%v) and EVAL failed (%v); is Lua disabled on this server?", ErrServerUnsupported, err, evalErr)
		}
	}
}

// loadAction names what Load found and did on a server in function mode:
// before and after are its library versions ("" for none), after at least
// LibraryVersion; loaded says a FUNCTION LOAD happened in between.
func loadAction(before, after string, loaded bool) LoadAction {
	switch {
	case compareVersions(after, LibraryVersion) > 0:
		return ActionKeptNewer
	case !loaded:
		return ActionCurrent
	case before == "":
		return ActionLoaded
	}
	return ActionUpgraded
}

// evalFallback switches one server to ModeEval after FUNCTION or FCALL was
// refused. A library loaded by an administrator is still preferred: if FCALL
// of the version function works, the server stays in function mode. When
// the ACL refuses EVAL too, the error says what this user may not do and
// what to do about it (load the library with a user allowed to).
func evalFallback(ctx context.Context, c redis.Cmdable, n NodeLoad, cause error) (NodeLoad, error) {
	v, verr := c.FCallRO(ctx, FunctionVersion, nil).Text()
	if verr == nil && compareVersions(v, LibraryVersion) >= 0 {
		n.After = v
		n.Action = loadAction(v, v, false)
		return n, nil
	}
	evalErr := c.Eval(ctx, "return 1", nil).Err()
	switch {
	case evalErr == nil:
		n.Action = ActionEval
		return n, nil
	case transient(evalErr):
		return n, fmt.Errorf("FUNCTION refused (%v), then EVAL: %w", cause, evalErr)
	case !isNoPermission(evalErr):
		return n, fmt.Errorf("%w: FUNCTION refused (%v) and EVAL refused (%v)", ErrServerUnsupported, cause, evalErr)
	case verr == nil:
		return n, &Error{Kind: ErrLibraryMissing, Err: ErrNoPermission, Message: fmt.Sprintf(
			"the server has library version %s, older than %s, and this ACL user may not replace it (%v) nor use the EVALSHA fallback (EVAL refused: %v); run `pelwarden load` (or pelwarden.Load) with a user allowed FUNCTION LOAD first",
			v, LibraryVersion, cause, evalErr)}
	case isFunctionMissing(verr):
		return n, &Error{Kind: ErrLibraryMissing, Err: ErrNoPermission, Message: fmt.Sprintf(
			"the library is not loaded on this server and this ACL user may not load it (%v) nor use the EVALSHA fallback (EVAL refused: %v); run `pelwarden load` (or pelwarden.Load) once with a user allowed FUNCTION LOAD",
			cause, evalErr)}
	default:
		// Scripting refused entirely, by the ACL.
		return n, &Error{Kind: ErrNoPermission, Err: ErrServerUnsupported, Message: fmt.Sprintf(
			"this ACL user may not call the library (FCALL_RO %s: %v) nor use the EVALSHA fallback (EVAL refused: %v); grant +fcall +fcall_ro",
			FunctionVersion, verr, evalErr)}
	}
}

// LoadedVersion returns the version of the pelwarden library loaded on the
// server c talks to, "" when none is (FUNCTION LOAD never ran there, or
// FUNCTION FLUSH removed it). Unlike Library.Version it never loads the
// library, and it does not see the EVALSHA shim: only a loaded library
// counts. On a Redis Cluster, ask each primary (ClusterClient.ForEachMaster).
func LoadedVersion(ctx context.Context, c redis.Cmdable) (string, error) {
	v, err := serverLibraryVersion(ctx, c)
	if err != nil {
		return "", translate(FunctionVersion, nil, err)
	}
	return v, nil
}

// serverLibraryVersion returns the version of the library on the server, ""
// when it is not loaded.
func serverLibraryVersion(ctx context.Context, c redis.Cmdable) (string, error) {
	v, err := c.FCallRO(ctx, FunctionVersion, nil).Text()
	switch {
	case err == nil:
		return v, nil
	case isFunctionMissing(err):
		return "", nil
	default:
		return "", err
	}
}

// checkServerVersion refuses servers older than Redis 7.0 (no Functions),
// explaining an FCALL_RO the server does not know. Valkey reports a
// compatible redis_version (7.2.4).
func checkServerVersion(ctx context.Context, c redis.Cmdable) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		if isNoPermission(err) {
			return nil // INFO refused: FUNCTION LOAD will tell.
		}
		return fmt.Errorf("INFO server: %w", err)
	}
	v := infoField(info, "redis_version")
	if v == "" {
		return nil
	}
	if compareVersions(v, "7.0.0") < 0 {
		return fmt.Errorf("%w: server is Redis %s; pelwarden needs Redis 7.0+ or Valkey 7.2+ (Redis Functions)", ErrServerUnsupported, v)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// compareVersions compares dotted numeric versions ("1.2.10" > "1.2.9").
// Non-numeric parts compare as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// call runs one library function with self-healing: "Function not found"
// loads the library and retries once; in ModeEval it runs EVALSHA (EVAL on
// NOSCRIPT).
func (l *Library) call(ctx context.Context, fn string, keys []string, args ...any) (any, error) {
	return l.callMode(ctx, fn, false, keys, args)
}

// callRO is call for the read-only functions (flag no-writes): FCALL_RO,
// EVALSHA_RO in ModeEval, so a user with read-only key permissions
// (%R~pattern) may call them, and so may a replica.
func (l *Library) callRO(ctx context.Context, fn string, keys []string, args ...any) (any, error) {
	return l.callMode(ctx, fn, true, keys, args)
}

func (l *Library) callMode(ctx context.Context, fn string, ro bool, keys []string, args []any) (any, error) {
	v, err := l.invoke(ctx, fn, ro, keys, args)
	if err != nil && (isFunctionMissing(err) || (l.Mode() == ModeUnknown && isNoPermission(err))) {
		if _, lerr := l.Load(ctx); lerr != nil {
			return nil, &Error{Function: fn, Message: "library missing and reload failed: " + lerr.Error(), Kind: ErrLibraryMissing, Err: lerr}
		}
		v, err = l.invoke(ctx, fn, ro, keys, args)
	}
	if err != nil {
		if isNoPermission(err) {
			return nil, l.noPermission(ctx, fn, ro, keys, err)
		}
		return nil, translate(fn, keys, err)
	}
	return v, nil
}

// noPermission translates an ACL refusal of the call itself. The server's
// text names a refused command but not a refused key ("No permissions to
// access a key"), so the keys are probed one by one with the version
// function (no-writes, touches nothing; only on this error path) and the
// refused ones are named with the grant they need.
func (l *Library) noPermission(ctx context.Context, fn string, ro bool, keys []string, err error) error {
	e := translate(fn, keys, err)
	var pe *Error
	if !errors.As(e, &pe) || l.Mode() != ModeFunction || len(keys) == 0 {
		return e
	}
	probe := func(keys ...string) error {
		if ro {
			return l.rdb.FCallRO(ctx, FunctionVersion, keys).Err()
		}
		return l.rdb.FCall(ctx, FunctionVersion, keys).Err()
	}
	if probe() != nil {
		return e // the command itself is refused (the text says so), or worse
	}
	cmd, access, grant := "FCALL", "read and write", "~"
	if ro {
		cmd, access, grant = "FCALL_RO", "read", "%R~"
	}
	for _, k := range keys {
		if isNoPermission(probe(k)) {
			pe.Message = fmt.Sprintf("this ACL user may not access key %s (%s needs %s access to every key of the call; grant %s%s): %s",
				k, cmd, access, grant, k, err.Error())
			pe.Key = k
			break
		}
	}
	return e
}

func (l *Library) invoke(ctx context.Context, fn string, ro bool, keys []string, args []any) (any, error) {
	switch {
	case l.Mode() == ModeEval && ro:
		return l.script.RunRO(ctx, l.rdb, keys, append([]any{fn}, args...)...).Result()
	case l.Mode() == ModeEval:
		return l.script.Run(ctx, l.rdb, keys, append([]any{fn}, args...)...).Result()
	case ro:
		return l.rdb.FCallRO(ctx, fn, keys, args...).Result()
	}
	return l.rdb.FCall(ctx, fn, keys, args...).Result()
}
