package pelwardentest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/internal/redact"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// T is the subset of testing.TB the helpers of this package use. *testing.T
// and *testing.B satisfy it; a test double can record failures (Fatalf
// must not return: testing.T's stops the goroutine with runtime.Goexit).
type T interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
	Name() string
}

// Environment variables read by Start.
const (
	// EnvImage names the image of a standalone server, e.g. "redis:7.4".
	EnvImage = "PELWARDEN_TEST_IMAGE"
	// EnvValkeyImage names the image WithValkey runs.
	EnvValkeyImage = "PELWARDEN_TEST_VALKEY_IMAGE"
	// EnvRedisURL points Start at an existing server
	// (redis://host:6379/0): nothing is started, and the keys of each
	// test's fixtures are removed when it ends (see NewFixture).
	EnvRedisURL = "PELWARDEN_TEST_REDIS_URL"
	// EnvClusterURL points Start(WithCluster()) at an existing cluster
	// (redis://host1:6379?addr=host2:6379&addr=host3:6379).
	EnvClusterURL = "PELWARDEN_TEST_CLUSTER_URL"
)

// Default images, used when neither an option nor the environment names one.
const (
	DefaultImage       = "redis:8"
	DefaultValkeyImage = "valkey/valkey:8"
)

// startTimeout bounds starting a server (or cluster) and loading the library.
const startTimeout = 5 * time.Minute

// Option adjusts Start.
type Option func(*options)

type options struct {
	image   string
	valkey  bool
	cluster bool
	skip    bool
}

// WithImage runs image instead of PELWARDEN_TEST_IMAGE or DefaultImage. It
// overrides WithValkey.
func WithImage(image string) Option { return func(o *options) { o.image = image } }

// WithValkey runs Valkey: PELWARDEN_TEST_VALKEY_IMAGE, or
// DefaultValkeyImage.
func WithValkey() Option { return func(o *options) { o.valkey = true } }

// WithCluster starts a Redis Cluster of three primaries (no replicas) in
// host network mode (Linux Docker), and Server.Client returns a
// *redis.ClusterClient. Name streams with a hash tag; Fixture's keys have
// one. With PELWARDEN_TEST_CLUSTER_URL set, that cluster is used instead.
func WithCluster() Option { return func(o *options) { o.cluster = true } }

// SkipIfUnavailable skips the test (t must then also have a Skipf method,
// as *testing.T has) instead of failing it when no server can be started:
// Docker is not reachable and no URL is set.
func SkipIfUnavailable() Option { return func(o *options) { o.skip = true } }

// Server is a server the tests of a process share. It is safe for
// concurrent use. Do not close its client.
type Server struct {
	client  redis.UniversalClient
	lib     *pelwarden.Library
	image   string
	cluster bool
	owned   bool // the client was opened here (closed by CloseShared)
	// existing: a server named by EnvRedisURL or EnvClusterURL, not
	// started here; fixtures remove their keys from it (cleanup.go).
	existing bool
	close    func() error
}

// Client returns the server's client: a *redis.Client, or a
// *redis.ClusterClient with WithCluster. It is shared; do not close it.
func (s *Server) Client() redis.UniversalClient { return s.client }

// Library returns a pelwarden Library on the server, already loaded.
func (s *Server) Library() *pelwarden.Library { return s.lib }

// Image returns the image the server runs, or "" for an existing server
// (a URL or Use).
func (s *Server) Image() string { return s.image }

// IsCluster reports whether the server is a Redis Cluster.
func (s *Server) IsCluster() bool { return s.cluster }

// resolved is what Start will do: connect to url, or start image.
type resolved struct {
	url     string
	image   string
	cluster bool
	// imageFrom is where image came from: the environment variable that
	// names it (EnvImage, EnvValkeyImage), "WithImage", or "" for
	// DefaultImage or DefaultValkeyImage.
	imageFrom string
	// imageEnv is the variable that names another image (EnvImage or
	// EnvValkeyImage), "" when WithImage chose it.
	imageEnv string
}

func (r resolved) key() string {
	if r.url != "" {
		return fmt.Sprintf("url=%s cluster=%t", r.url, r.cluster)
	}
	return fmt.Sprintf("image=%s cluster=%t", r.image, r.cluster)
}

func resolve(opts []Option) (resolved, options) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	r := resolved{cluster: o.cluster}
	env := EnvRedisURL
	if o.cluster {
		env = EnvClusterURL
	}
	if u := strings.TrimSpace(os.Getenv(env)); u != "" {
		r.url = u
		return r, o
	}
	switch {
	case o.image != "":
		r.image, r.imageFrom = o.image, "WithImage"
	case o.valkey:
		r.image, r.imageFrom = envOr(EnvValkeyImage, DefaultValkeyImage)
		r.imageEnv = EnvValkeyImage
	default:
		r.image, r.imageFrom = envOr(EnvImage, DefaultImage)
		r.imageEnv = EnvImage
	}
	return r, o
}

// envOr returns the value of the environment variable name and name, or
// def and "" when it is unset.
func envOr(name, def string) (value, from string) {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v, name
	}
	return def, ""
}

// shared holds the process's servers, one per resolved key.
var shared struct {
	mu      sync.Mutex
	servers map[string]*sharedServer
}

type sharedServer struct {
	once sync.Once
	srv  *Server
	err  error
}

// Start returns the process's shared server for opts, starting it on first
// use (the first test waits; concurrent callers wait for the same start)
// and loading the pelwarden library. A failed start is remembered: every
// later test fails at once with the same message, which says how to go on
// (EnvRedisURL for a server you run, or an image Docker has: EnvImage,
// EnvValkeyImage, WithImage).
//
// The container stays up for the tests that follow; Main (or CloseShared)
// removes it at the end. Without either, it is left to testcontainers'
// reaper (Ryuk), which removes it when the test process exits; where Ryuk
// is disabled (TESTCONTAINERS_RYUK_DISABLED=true), call Main.
func Start(t T, opts ...Option) *Server {
	t.Helper()
	r, o := resolve(opts)
	shared.mu.Lock()
	if shared.servers == nil {
		shared.servers = map[string]*sharedServer{}
	}
	ss := shared.servers[r.key()]
	if ss == nil {
		ss = &sharedServer{}
		shared.servers[r.key()] = ss
	}
	shared.mu.Unlock()
	ss.once.Do(func() { ss.srv, ss.err = open(r) })
	if ss.err != nil {
		var unavailable *unavailableError
		if o.skip && errors.As(ss.err, &unavailable) {
			if s, ok := t.(interface{ Skipf(string, ...any) }); ok {
				s.Skipf("%v", ss.err)
			}
		}
		t.Fatalf("%v", ss.err)
	}
	return ss.srv
}

// unavailableError: Docker is not reachable and no URL is set.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string {
	return fmt.Sprintf("pelwardentest: Docker is not available (%v); start Docker, or set %s (%s with WithCluster) to use an existing server", e.err, EnvRedisURL, EnvClusterURL)
}

func (e *unavailableError) Unwrap() error { return e.err }

// startError: Docker is there, but no server could be started from the
// image (most often: the image is neither on the machine nor pullable).
// Its message says how to go on without that image.
type startError struct {
	r   resolved
	err error
}

func (e *startError) Error() string {
	var b strings.Builder
	what, url := "a server", EnvRedisURL
	if e.r.cluster {
		what, url = "a Redis Cluster", EnvClusterURL
	}
	fmt.Fprintf(&b, "pelwardentest: could not start %s from image %q", what, e.r.image)
	switch e.r.imageFrom {
	case "":
		b.WriteString(" (the default)")
	default:
		fmt.Fprintf(&b, " (from %s)", e.r.imageFrom)
	}
	fmt.Fprintf(&b, ": %v. ", e.err)
	fmt.Fprintf(&b, "To test against a server you already run, set %s=redis://host:6379/0 (nothing is started; each test's keys are removed when it ends). ", url)
	fmt.Fprintf(&b, "To use Docker, make the image available (docker pull %s)", e.r.image)
	if e.r.imageEnv != "" {
		fmt.Fprintf(&b, " or set %s to an image you have", e.r.imageEnv)
	} else {
		b.WriteString(" or pass WithImage an image you have")
	}
	b.WriteString(", for instance one built from Debian's package: " + debianRecipe(e.r))
	return b.String()
}

func (e *startError) Unwrap() error { return e.err }

// debianRecipe is a one-line docker build of a server image from Debian's
// package, for startError: its entrypoint is the server binary, which
// takes the flags testserver passes.
func debianRecipe(r resolved) string {
	pkg, tag := "redis-server", "local/redis:8"
	if strings.Contains(r.image, "valkey") {
		pkg, tag = "valkey-server", "local/valkey:8"
	}
	env := r.imageEnv
	if env == "" {
		env = EnvImage
	}
	return fmt.Sprintf(`printf 'FROM debian:trixie-slim\nRUN apt-get update && apt-get install -y %s\nENTRYPOINT ["%s"]\n' | docker build -t %s - && export %s=%s`, pkg, pkg, tag, env, tag)
}

// starters are what open starts servers with; tests replace them to see
// what a failure reports.
type starters struct {
	health  func(context.Context) error
	single  func(context.Context, string, testserver.Options) (*testserver.Server, error)
	cluster func(context.Context, string, testserver.ClusterOptions) (*testserver.Cluster, error)
}

// docker starts servers in containers.
var docker = starters{health: dockerHealth, single: testserver.Start, cluster: testserver.StartCluster}

func open(r resolved) (*Server, error) { return openWith(r, docker) }

func openWith(r resolved, st starters) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if r.url != "" {
		return openURL(ctx, r)
	}
	if err := st.health(ctx); err != nil {
		return nil, &unavailableError{err: err}
	}
	if r.cluster {
		c, err := st.cluster(ctx, r.image, testserver.ClusterOptions{})
		if err != nil {
			return nil, &startError{r: r, err: err}
		}
		srv := &Server{client: c.Client(), image: r.image, cluster: true, owned: true, close: c.Close}
		return srv, srv.load(ctx)
	}
	s, err := st.single(ctx, r.image, testserver.Options{})
	if err != nil {
		return nil, &startError{r: r, err: err}
	}
	srv := &Server{client: s.Client(), image: r.image, owned: true, close: s.Close}
	return srv, srv.load(ctx)
}

func openURL(ctx context.Context, r resolved) (*Server, error) {
	var rdb redis.UniversalClient
	if r.cluster {
		o, err := redis.ParseClusterURL(r.url)
		if err != nil {
			return nil, fmt.Errorf("pelwardentest: %s: %w", EnvClusterURL, err)
		}
		rdb = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(r.url)
		if err != nil {
			return nil, fmt.Errorf("pelwardentest: %s: %w", EnvRedisURL, err)
		}
		rdb = redis.NewClient(o)
	}
	srv := &Server{client: rdb, cluster: r.cluster, owned: true, existing: true}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("pelwardentest: connect to %s: %w", redact.URL(r.url), err)
	}
	return srv, srv.load(ctx)
}

func dockerHealth(ctx context.Context) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // closes p
}

func (s *Server) load(ctx context.Context) error {
	s.lib = pelwarden.NewLibrary(s.client)
	if _, err := s.lib.Load(ctx); err != nil {
		return errors.Join(fmt.Errorf("pelwardentest: load the pelwarden library: %w", err), s.shutdown())
	}
	return nil
}

func (s *Server) shutdown() error {
	var errs []error
	if s.owned {
		errs = append(errs, s.client.Close())
	}
	if s.close != nil {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// Use wraps a client you already have (a server your own harness started)
// in a Server, loading the pelwarden library on it. Nothing is started, and
// the client is not closed: it stays yours.
func Use(t T, rdb redis.UniversalClient) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lib := pelwarden.NewLibrary(rdb)
	if _, err := lib.Load(ctx); err != nil {
		t.Fatalf("pelwardentest: load the pelwarden library: %v", err)
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return &Server{client: rdb, lib: lib, cluster: cluster}
}

// Main runs the tests and then removes the shared servers Start started,
// and exits with the tests' status. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pelwardentest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if err := CloseShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// CloseShared removes the servers Start started and closes their clients,
// for a TestMain that cannot use Main. Tests must not run concurrently
// with it; a later Start starts a new server.
func CloseShared() error {
	shared.mu.Lock()
	servers := shared.servers
	shared.servers = nil
	shared.mu.Unlock()
	keys := make([]string, 0, len(servers))
	for k := range servers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		if ss := servers[k]; ss.srv != nil && ss.err == nil {
			if err := ss.srv.shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("pelwardentest: close %s: %w", k, err))
			}
		}
	}
	return errors.Join(errs...)
}
