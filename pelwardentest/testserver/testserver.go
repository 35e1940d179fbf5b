// Package testserver starts Redis and Valkey servers in containers for
// tests (testcontainers-go): single servers (Start, with TLS if asked),
// Redis Clusters (StartCluster) and a primary with replicas watched by
// sentinels (StartSentinel), with the means to stop, restart or cut off a
// node. pelwardentest's Start is built on it; use this package directly
// when a test needs a deployment of its own (a cluster to fail over, a
// server to restart). Neither the root package nor driver imports it.
//
// Image names come from PELWARDEN_IMAGES (comma separated). The defaults are
// the images scripts/images.sh builds from Debian's packages, because no
// registry is reachable where pelwarden is developed; a user with Docker Hub
// access can set PELWARDEN_IMAGES=redis:7.0,redis:8.0,valkey/valkey:8.1,...
package testserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// DefaultImages is the server matrix: Redis 7.0, Redis 8.0, Redis 8.6,
// Valkey 8.1 and Valkey 9.1, as built by scripts/images.sh.
var DefaultImages = []string{
	"pelwarden/redis:7.0",
	"pelwarden/redis:8.0",
	"pelwarden/redis:8.6",
	"pelwarden/valkey:8.1",
	"pelwarden/valkey:9.1",
}

// Images returns the images of the test matrix: PELWARDEN_IMAGES, or
// DefaultImages.
func Images() []string {
	if v := strings.TrimSpace(os.Getenv("PELWARDEN_IMAGES")); v != "" {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	return DefaultImages
}

// Server is one server in a container.
type Server struct {
	// Image the container runs.
	Image string
	// Name is a short label for test names, e.g. "redis-7.0".
	Name string

	container *testcontainers.DockerContainer
	tls       *tls.Config // the client side, nil without TLS
	direct    bool        // reached at the container's own address (see Addr)
}

// Options adjust a server.
type Options struct {
	// Args are extra server flags, e.g. "--appendonly", "yes".
	Args []string
	// TLS, when set, makes the server speak TLS only (no plain port).
	TLS *TLS
}

// TLS configures a server that speaks TLS only. The files are PEM files on
// this machine; they are copied into the container.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and private key.
	CertFile, KeyFile string
	// CAFile is the CA the server checks client certificates against (the
	// server wants one even when it does not ask for client certificates).
	CAFile string
	// AuthClients makes the server require a client certificate signed by
	// CAFile (tls-auth-clients yes).
	AuthClients bool
	// Client is the TLS configuration Options and Client dial with (the CA
	// to verify the server with, a client certificate if needed). Required.
	Client *tls.Config
}

// Start starts a server from image and waits until it accepts connections.
func Start(ctx context.Context, image string, opts Options) (*Server, error) {
	args := []string{"--port", "6379"}
	var files []testcontainers.ContainerFile
	if t := opts.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" || t.Client == nil {
			return nil, fmt.Errorf("testserver: TLS needs CertFile, KeyFile, CAFile and Client")
		}
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		args = []string{"--port", "0", "--tls-port", "6379",
			"--tls-cert-file", "/tls/server.crt", "--tls-key-file", "/tls/server.key",
			"--tls-ca-cert-file", "/tls/ca.crt", "--tls-auth-clients", auth}
		files = []testcontainers.ContainerFile{
			{HostFilePath: t.CertFile, ContainerFilePath: "/tls/server.crt", FileMode: 0o644},
			{HostFilePath: t.KeyFile, ContainerFilePath: "/tls/server.key", FileMode: 0o600},
			{HostFilePath: t.CAFile, ContainerFilePath: "/tls/ca.crt", FileMode: 0o644},
		}
	}
	args = append(args, "--protected-mode", "no", "--save", "")
	args = append(args, opts.Args...)
	c, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithCmd(args...),
		testcontainers.WithFiles(files...),
		testcontainers.WithWaitStrategyAndDeadline(60*time.Second,
			wait.ForLog("Ready to accept connections"),
			wait.ForListeningPort("6379/tcp"),
		),
	)
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.Background())
		}
		return nil, fmt.Errorf("testserver: start %s: %w%s", image, err, imageHint(image))
	}
	s := &Server{Image: image, Name: Label(image), container: c}
	if opts.TLS != nil {
		s.tls = opts.TLS.Client.Clone()
	} else {
		s.direct = reachesContainers(ctx, c)
	}
	return s, nil
}

// EnvPublishedPorts, when set, makes servers reachable only at the ports
// Docker publishes on the host (through its proxy), even where their own
// addresses are reachable (see Server.Addr).
const EnvPublishedPorts = "PELWARDEN_TEST_PUBLISHED_PORTS"

// unreachable is set once a container's own address did not answer this
// process: later servers skip the probe (on Docker Desktop, or with a
// remote or rootless engine, none will).
var unreachable atomic.Bool

// reachesContainers reports whether this process reaches the container c
// at its own address on Docker's network: it dials it once (a second at
// most), unless an earlier container did not answer or EnvPublishedPorts
// is set. Where it does (Linux with a local engine), clients skip the
// userland proxy that forwards a published port, whose copies of every
// byte cost about as much CPU as the server's own work.
func reachesContainers(ctx context.Context, c *testcontainers.DockerContainer) bool {
	if os.Getenv(EnvPublishedPorts) != "" || unreachable.Load() {
		return false
	}
	ip, err := c.ContainerIP(ctx)
	if err == nil && ip != "" {
		d := net.Dialer{Timeout: time.Second}
		var conn net.Conn
		if conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort(ip, "6379")); err == nil {
			_ = conn.Close()
			return true
		}
	}
	if ctx.Err() == nil {
		unreachable.Store(true)
	}
	return false
}

// imageHint is what an error starting image adds: for pelwarden's own
// images (DefaultImages, "pelwarden/..."), where they come from; "" for any
// other image (Docker pulls it from its registry).
func imageHint(image string) string {
	if strings.HasPrefix(image, "pelwarden/") {
		return " (an image of pelwarden's test matrix, built by scripts/images.sh in pelwarden's repository)"
	}
	return ""
}

// Label turns an image name into a short test label:
// "pelwarden/valkey:8.1" -> "valkey-8.1".
func Label(image string) string {
	s := image
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return strings.ReplaceAll(s, ":", "-")
}

// Addr returns the host:port the server is reachable at now (it changes
// when the container is restarted): the container's own address on
// Docker's network where this process reaches it (Linux with a local
// engine; see EnvPublishedPorts), else the port Docker publishes on the
// host. A TLS server is always reached at its published port, which its
// certificate names (127.0.0.1). While the container is stopped Addr fails
// at once, saying what state the container is in.
func (s *Server) Addr(ctx context.Context) (string, error) {
	if s.direct {
		ip, err := s.container.ContainerIP(ctx)
		if err == nil && ip != "" {
			return net.JoinHostPort(ip, "6379"), nil
		}
		// Stopped (no address): the published port's lookup below says
		// what state the container is in.
	}
	host, err := s.container.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("testserver: host: %w", err)
	}
	port, err := s.container.MappedPort(ctx, "6379/tcp")
	if err != nil {
		state := "state unknown"
		if st, serr := s.container.State(context.WithoutCancel(ctx)); serr == nil && st != nil {
			state = fmt.Sprintf("%s, exit code %d, error %q", st.Status, st.ExitCode, st.Error)
		}
		return "", fmt.Errorf("testserver: mapped port (container %s): %w", state, err)
	}
	return net.JoinHostPort(host, port.Port()), nil
}

// Options returns go-redis options whose dialer follows the container across
// restarts (the mapped port is looked up on every dial). A TLS server is
// dialled with TLS.Client.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr, err := s.Addr(ctx)
			if err != nil {
				return nil, err
			}
			if s.tls != nil {
				d := tls.Dialer{Config: s.tls}
				return d.DialContext(ctx, network, addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		Addr:         "testserver",
		DialTimeout:  5 * time.Second,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	}
}

// Client returns a new client for the server; the caller closes it.
func (s *Server) Client() *redis.Client { return redis.NewClient(s.Options()) }

// Restart stops and starts the container (its data is lost unless the
// server persists it).
func (s *Server) Restart(ctx context.Context) error {
	timeout := 10 * time.Second
	if err := s.container.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("testserver: stop: %w", err)
	}
	if err := s.container.Start(ctx); err != nil {
		return fmt.Errorf("testserver: start: %w", err)
	}
	return nil
}

// Close removes the container.
func (s *Server) Close() error {
	if err := s.container.Terminate(context.Background()); err != nil {
		return fmt.Errorf("testserver: terminate %s: %w", s.Image, err)
	}
	return nil
}

// StartAll starts one server per image concurrently. On error the servers
// already started are closed.
func StartAll(ctx context.Context, images []string) ([]*Server, error) {
	type result struct {
		i   int
		s   *Server
		err error
	}
	ch := make(chan result, len(images))
	for i, img := range images {
		go func() {
			s, err := Start(ctx, img, Options{})
			ch <- result{i, s, err}
		}()
	}
	out := make([]*Server, len(images))
	var firstErr error
	for range images {
		r := <-ch
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		out[r.i] = r.s
	}
	if firstErr != nil {
		for _, s := range out {
			if s != nil {
				_ = s.Close()
			}
		}
		return nil, firstErr
	}
	return out, nil
}

// EnvRequireDocker, when set (make test sets it), makes SkipWithoutDocker
// fail instead of skipping: on CI a missing Docker engine is an error.
const EnvRequireDocker = "PELWARDEN_REQUIRE_DOCKER"

// SkipWithoutDocker is for a TestMain whose tests all need containers. It
// returns true (after printing one line that says how to run them) when no
// Docker engine answers and EnvRequireDocker is not set: the caller then
// exits 0 without running the tests. With EnvRequireDocker set it returns
// false and the tests fail on their own.
func SkipWithoutDocker(ctx context.Context, what string) bool {
	if os.Getenv(EnvRequireDocker) != "" {
		return false
	}
	err := dockerHealth(ctx)
	if err == nil {
		return false
	}
	fmt.Fprintf(os.Stderr, "%s: skipped: no Docker engine answers (%v); run `make test` on a machine with Docker (it builds the server images), or set %s=1 to fail instead\n", what, err, EnvRequireDocker)
	return true
}

// dockerHealth asks the Docker engine whether it answers (a variable for
// the tests).
var dockerHealth = func(ctx context.Context) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	return p.Health(ctx) // closes p
}
