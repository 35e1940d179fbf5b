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
)

// defaultThrowawayImage is the container image of a throwaway server when
// no redis-server or valkey-server binary is on PATH and no image variable
// is set.
const defaultThrowawayImage = "redis:8"

// throwaway is a server started for one command and removed at its end, or
// (from serverFor) a server the user named, which Close leaves alone.
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

// benchServer is the server of a command that takes a single server: the
// one --redis names (checked to answer), else a throwaway one.
func (a *app) benchServer(ctx context.Context, e *endpoint, logf func(string)) (*throwaway, error) {
	if e == nil {
		return startThrowaway(ctx, []string{"PELWARDEN_BENCH_IMAGE", "PELWARDEN_DEMO_IMAGE"}, logf)
	}
	c, err := e.client(ctx) // checks the server answers
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	opts := *e.opts
	return &throwaway{label: e.shown, opts: &opts, stop: func() error { return nil }}, nil
}

// startThrowaway starts a throwaway server: a redis-server or valkey-server
// binary found on PATH (version 7.0 or newer) on a free loopback port, else
// a container from the first of imageEnvs that is set (default
// defaultThrowawayImage), run with the docker command line so that this
// binary links no container client library. logf receives progress lines.
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
	logf(fmt.Sprintf("no redis-server or valkey-server on PATH: starting a throwaway container from %s", image))
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	t, err := startContainer(sctx, image)
	if err != nil {
		return nil, failuref("no redis-server or valkey-server (7.0+) on PATH, and the container failed: %v. "+
			"Install redis-server, or build a local image (./scripts/images.sh pelwarden/redis:8.0) and set %s=pelwarden/redis:8.0, or pass --redis URL",
			err, imageEnvs[0])
	}
	return t, nil
}

// startContainer runs image with docker, publishing the server's port on a
// free loopback port, and waits until it answers PING. The image's
// entrypoint must take the server's flags (the official redis and valkey
// images and scripts/images.sh's do). Close removes the container.
func startContainer(ctx context.Context, image string) (*throwaway, error) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		return nil, errors.New("no docker command on PATH")
	}
	out, err := exec.CommandContext(ctx, docker, "run", "--detach", "--rm", "--label", "pelwarden.throwaway=true",
		"--publish", "127.0.0.1::6379", image,
		"--port", "6379", "--protected-mode", "no", "--save", "", "--appendonly", "no").Output()
	if err != nil {
		return nil, fmt.Errorf("docker run %s: %w%s", image, err, stderrOf(err))
	}
	id := strings.TrimSpace(string(out))
	var once sync.Once
	remove := func() error {
		var rerr error
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := exec.CommandContext(rctx, docker, "rm", "--force", id).Run(); err != nil {
				rerr = fmt.Errorf("docker rm %s: %w%s", shortID(id), err, stderrOf(err))
			}
		})
		return rerr
	}
	out, err = exec.CommandContext(ctx, docker, "port", id, "6379/tcp").Output()
	if err != nil {
		_ = remove()
		return nil, fmt.Errorf("docker port %s: %w%s", shortID(id), err, stderrOf(err))
	}
	addr := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if _, _, err := net.SplitHostPort(addr); err != nil {
		_ = remove()
		return nil, fmt.Errorf("docker port %s: unexpected address %q", shortID(id), addr)
	}
	opts := &redis.Options{Addr: addr}
	if err := waitReady(ctx, opts, nil); err != nil {
		logs, _ := exec.Command(docker, "logs", "--tail", "20", id).CombinedOutput()
		_ = remove()
		return nil, fmt.Errorf("container %s on %s: %v: %s", shortID(id), addr, err, tail(string(logs), 300))
	}
	return &throwaway{label: fmt.Sprintf("container %s on %s", image, addr), opts: opts, stop: remove}, nil
}

// stderrOf is ": " and the stderr of a failed command, or "".
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + tail(string(ee.Stderr), 300)
	}
	return ""
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
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

// waitReady polls PING until it answers, the process exits (exited may be
// nil), or 15s pass.
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
