package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/pelwarden/pelwarden/internal/testserver"
)

// defaultThrowawayImage is the container image of a throwaway server when
// no redis-server or valkey-server binary is on PATH and
// $PELWARDEN_DEMO_IMAGE is not set.
const defaultThrowawayImage = "redis:8"

// throwaway is a server started for one command and removed at its end.
type throwaway struct {
	// label says what runs, e.g. "local valkey-server 8.1.1 on 127.0.0.1:40123".
	label string
	// opts connect to it.
	opts *redis.Options
	stop func() error
}

// Close stops the server and removes what it left (process, data directory,
// container).
func (t *throwaway) Close() error { return t.stop() }

// startThrowaway starts a throwaway server: a redis-server or valkey-server
// binary found on PATH (version 7.0 or newer) on a free loopback port, else
// a container from imageEnv's image (default defaultThrowawayImage) through
// testcontainers. logf receives progress lines.
func startThrowaway(ctx context.Context, imageEnvs []string, logf func(string)) (*throwaway, error) {
	var skipped []string
	for _, name := range []string{"redis-server", "valkey-server"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		version, major := binaryVersion(ctx, bin)
		if major < 7 {
			skipped = append(skipped, fmt.Sprintf("%s %s is older than 7.0", bin, version))
			continue
		}
		logf(fmt.Sprintf("starting a throwaway %s %s on loopback", name, version))
		t, err := startLocal(ctx, bin, name+" "+version)
		if err == nil {
			return t, nil
		}
		skipped = append(skipped, err.Error())
	}
	for _, s := range skipped {
		logf("skipped: " + s)
	}

	image := defaultThrowawayImage
	for _, env := range imageEnvs {
		if v := strings.TrimSpace(os.Getenv(env)); v != "" {
			image = v
			break
		}
	}
	// The reaper container (Ryuk) needs a registry; this command removes
	// its container itself, also when interrupted.
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	tclog.SetDefault(tclog.NewNoopLogger())
	logf(fmt.Sprintf("no redis-server or valkey-server on PATH: starting a throwaway container from %s", image))
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	srv, err := testserver.Start(sctx, image, testserver.Options{})
	if err != nil {
		return nil, failuref("no redis-server or valkey-server (7.0+) on PATH, and the container failed: %v. "+
			"Install redis-server, or build a local image (./scripts/images.sh pelwarden/redis:8.0) and set %s=pelwarden/redis:8.0, or pass --redis URL",
			err, imageEnvs[0])
	}
	addr, _ := srv.Addr(ctx)
	return &throwaway{
		label: fmt.Sprintf("container %s on %s", image, addr),
		opts:  srv.Options(),
		stop:  srv.Close,
	}, nil
}

var versionRE = regexp.MustCompile(`v=(\d+)\.(\d+)\.(\d+)`)

// binaryVersion runs "bin --version" ("Redis server v=7.2.4 ...").
func binaryVersion(ctx context.Context, bin string) (string, int) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, bin, "--version").Output()
	if err != nil {
		return "unknown", 0
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "unknown", 0
	}
	major, _ := strconv.Atoi(m[1])
	return m[1] + "." + m[2] + "." + m[3], major
}

// startLocal runs bin on a free loopback port without persistence, in a
// temporary directory, and waits until it answers PING.
func startLocal(ctx context.Context, bin, label string) (*throwaway, error) {
	dir, err := os.MkdirTemp("", "pelwarden-demo-server-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
		cmd.Stdout, cmd.Stderr = &syncWriter{w: &out}, &syncWriter{w: &out}
		cmd.SysProcAttr = childProcAttr()
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		opts := &redis.Options{Addr: addr}
		if err := waitReady(ctx, opts, exited); err != nil {
			_ = cmd.Process.Kill()
			<-exited
			lastErr = fmt.Errorf("%s on %s: %v: %s", bin, addr, err, tail(out.String(), 300))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		var once sync.Once
		stop := func() error {
			once.Do(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				_ = os.RemoveAll(dir)
			})
			return nil
		}
		return &throwaway{label: fmt.Sprintf("local %s on %s", label, addr), opts: opts, stop: stop}, nil
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// waitReady polls PING until it answers, the process exits, or 15s pass.
func waitReady(ctx context.Context, opts *redis.Options, exited <-chan struct{}) error {
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited at start")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 15s: %v", err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.Join(strings.Fields(s), " ")
}

// syncWriter serialises writes of a child's stdout and stderr.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w.Len() > 64<<10 {
		return len(p), nil
	}
	return s.w.Write(p)
}
