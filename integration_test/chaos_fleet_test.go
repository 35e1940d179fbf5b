package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chaosFleet runs the consumers of a scenario as subprocesses (the test
// binary re-executed with chaosConsumerEnv). It has a fixed number of slots,
// each holding one live consumer; kill SIGKILLs a slot's process and starts
// a consumer under a new name in its place. Every process is reaped: close
// kills what is still running and waits for it.
type chaosFleet struct {
	exe  string
	dir  string
	base chaosConsumerConfig

	mu         sync.Mutex
	slots      []*chaosProc
	all        []*chaosProc
	started    int
	stopping   bool
	unexpected []string // exits nobody asked for
}

// chaosProc is one consumer process.
type chaosProc struct {
	name    string
	slot    int
	logPath string
	metrics string
	cmd     *exec.Cmd
	ready   chan struct{} // closed once it handles SIGTERM, or has exited
	done    chan struct{} // closed once reaped; err is set before
	err     error
	killed  bool // under fleet.mu: SIGKILLed by the harness
	stopped bool // under fleet.mu: asked to stop with SIGTERM
}

func newChaosFleet(dir string, base chaosConsumerConfig, n int) (*chaosFleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f := &chaosFleet{exe: exe, dir: dir, base: base, slots: make([]*chaosProc, n)}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		if err := f.startLocked(i); err != nil {
			return f, err
		}
	}
	return f, nil
}

// startLocked starts a new consumer in slot i. f.mu is held.
func (f *chaosFleet) startLocked(i int) error {
	f.started++
	name := fmt.Sprintf("c%d-%d", i, f.started)
	cfg := f.base
	cfg.Consumer = name
	cfg.MetricsFile = filepath.Join(f.dir, name+".metrics.json")
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	logPath := filepath.Join(f.dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	// The child writes to (or, dying, closes) its end of this pipe once it
	// handles SIGTERM: before that, SIGTERM would kill it outright.
	readyR, readyW, err := os.Pipe()
	if err != nil {
		_ = out.Close()
		return err
	}
	cmd := exec.Command(f.exe)
	cmd.Env = append(os.Environ(), chaosConsumerEnv+"="+string(b))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{readyW} // fd 3 in the child
	cmd.SysProcAttr = chaosProcAttr()
	err = cmd.Start()
	_ = readyW.Close()
	if err != nil {
		_ = readyR.Close()
		_ = out.Close()
		return fmt.Errorf("chaos: start consumer %s: %w", name, err)
	}
	p := &chaosProc{name: name, slot: i, logPath: logPath, metrics: cfg.MetricsFile, cmd: cmd,
		ready: make(chan struct{}), done: make(chan struct{})}
	f.slots[i] = p
	f.all = append(f.all, p)
	go func() {
		var b [1]byte
		_, _ = readyR.Read(b[:])
		_ = readyR.Close()
		close(p.ready)
	}()
	go f.reap(p, out)
	return nil
}

// terminate sends SIGTERM to p once it handles it (or has exited), waiting
// at most timeout for that.
func (p *chaosProc) terminate(timeout time.Duration) {
	select {
	case <-p.ready:
	case <-time.After(timeout):
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// reap waits for p's exit. A consumer that exits without being killed or
// stopped is a failure of the scenario (Run returned an error); it is
// recorded and replaced so the scenario can still drain.
func (f *chaosFleet) reap(p *chaosProc, out *os.File) {
	err := p.cmd.Wait()
	_ = out.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	p.err = err
	close(p.done)
	if p.killed || p.stopped {
		return
	}
	f.unexpected = append(f.unexpected, fmt.Sprintf("consumer %s exited by itself (%v); its log ends with:\n%s", p.name, err, tailFile(p.logPath, 15)))
	if !f.stopping && f.slots[p.slot] == p {
		if err := f.startLocked(p.slot); err != nil {
			f.unexpected = append(f.unexpected, err.Error())
		}
	}
}

// kill SIGKILLs the consumer of slot i, waits until it is reaped and starts
// a new consumer, under a new name, in its place.
func (f *chaosFleet) kill(i int) error { return f.replaceWithin(i, false, 0) }

// restart stops the consumer of slot i gracefully (SIGTERM: Run's context
// is cancelled and it must return nil within timeout) and starts a new
// consumer, under a new name, in its place.
func (f *chaosFleet) restart(i int, timeout time.Duration) error {
	return f.replaceWithin(i, true, timeout)
}

// replaceWithin stops the consumer of slot i (SIGKILL, or SIGTERM with a
// clean exit expected within timeout) and starts a new one in its place.
func (f *chaosFleet) replaceWithin(i int, graceful bool, timeout time.Duration) error {
	f.mu.Lock()
	p := f.slots[i]
	if f.stopping || p == nil {
		f.mu.Unlock()
		return nil
	}
	if graceful {
		p.stopped = true
	} else {
		p.killed = true
	}
	f.mu.Unlock()
	var failure error
	if graceful {
		p.terminate(timeout)
		select {
		case <-p.done:
			if p.err != nil {
				failure = fmt.Errorf("consumer %s stopped with %v; its log ends with:\n%s", p.name, p.err, tailFile(p.logPath, 15))
			}
		case <-time.After(timeout):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			failure = fmt.Errorf("consumer %s did not stop within %v of SIGTERM; its log ends with:\n%s", p.name, timeout, tailFile(p.logPath, 15))
		}
	} else {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("chaos: kill %s: %w", p.name, err)
		}
		<-p.done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping || f.slots[i] != p {
		return failure
	}
	if err := f.startLocked(i); err != nil {
		return errors.Join(failure, err)
	}
	return failure
}

// stop asks every live consumer to shut down (SIGTERM: Run's context is
// cancelled) and waits for them. A consumer that does not exit within
// timeout is killed. It returns the failures: nonzero exits and timeouts.
func (f *chaosFleet) stop(timeout time.Duration) []string {
	f.mu.Lock()
	f.stopping = true
	live := make([]*chaosProc, 0, len(f.slots))
	for _, p := range f.slots {
		if p != nil {
			p.stopped = true
			live = append(live, p)
		}
	}
	f.mu.Unlock()
	for _, p := range live {
		p.terminate(timeout)
	}
	var failures []string
	deadline := time.After(timeout)
	for _, p := range live {
		select {
		case <-p.done:
		case <-deadline:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			failures = append(failures, fmt.Sprintf("consumer %s did not stop within %v of SIGTERM; its log ends with:\n%s", p.name, timeout, tailFile(p.logPath, 15)))
			continue
		}
		if p.err != nil {
			failures = append(failures, fmt.Sprintf("consumer %s stopped with %v; its log ends with:\n%s", p.name, p.err, tailFile(p.logPath, 15)))
		}
	}
	return failures
}

// close kills and reaps whatever still runs (test cleanup).
func (f *chaosFleet) close() {
	f.mu.Lock()
	f.stopping = true
	all := append([]*chaosProc(nil), f.all...)
	for _, p := range all {
		p.stopped = true
	}
	f.mu.Unlock()
	for _, p := range all {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// failures returns the unexpected exits so far, and every data race report
// the consumers' race detector wrote (a SIGKILLed process never gets to exit
// with the race detector's status, so the logs are searched).
func (f *chaosFleet) failures() []string {
	f.mu.Lock()
	out := append([]string(nil), f.unexpected...)
	all := append([]*chaosProc(nil), f.all...)
	f.mu.Unlock()
	for _, p := range all {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
			out = append(out, fmt.Sprintf("consumer %s: data race:\n%s", p.name, firstLines(string(b[i:]), 60)))
		}
		if i := bytes.Index(b, []byte("fatal error:")); i >= 0 {
			out = append(out, fmt.Sprintf("consumer %s: fatal error:\n%s", p.name, firstLines(string(b[i:]), 40)))
		}
	}
	return out
}

// dumpStacks makes every running consumer print its goroutines (SIGQUIT,
// which also ends it) and returns, per consumer, what its driver
// goroutines were doing: where each is blocked, counted. It is called
// when the drain fails, to show a stuck loop; the fleet is not usable
// afterwards but for stop.
func (f *chaosFleet) dumpStacks(timeout time.Duration) []string {
	f.mu.Lock()
	var live []*chaosProc
	for _, p := range f.slots {
		if p != nil && !closedChan(p.done) {
			p.stopped = true // its exit is asked for, not a failure
			live = append(live, p)
		}
	}
	f.mu.Unlock()
	var out []string
	for _, p := range live {
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(timeout):
			out = append(out, fmt.Sprintf("consumer %s: no stack dump within %v of SIGQUIT", p.name, timeout))
			continue
		}
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		kept := keepLog(p.name, b)
		out = append(out, fmt.Sprintf("consumer %s, driver goroutines at the failed drain (whole log kept at %s):\n%s", p.name, kept, driverStacks(string(b))))
	}
	return out
}

// keepLog copies a consumer's log out of the test's temporary directory,
// which is removed at the end, so that a failed drain can be studied.
func keepLog(name string, b []byte) string {
	f, err := os.CreateTemp("", "pelwarden-chaos-"+name+"-*.log")
	if err != nil {
		return "nowhere (" + err.Error() + ")"
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "nowhere (" + err.Error() + ")"
	}
	return f.Name()
}

// driverStacks summarises a goroutine dump: for each goroutine running
// pelwarden's driver, its state, its top frame and its driver frames
// (innermost first, so a loop blocked in the window reads
// "window.reserve < run.reclaimPass < run.reclaimLoop"), counted.
func driverStacks(dump string) string {
	counts := map[string]int{}
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if i := strings.Index(l, "pelwarden/driver."); i >= 0 && !strings.HasPrefix(l, "\t") {
				fn := l[i+len("pelwarden/driver."):]
				if j := strings.IndexByte(fn, '('); j > 0 && !strings.HasPrefix(fn, "(") {
					fn = fn[:j]
				} else if j := strings.Index(fn, ")."); j > 0 {
					// "(*run).reclaimPass(0xc0...)" -> "run.reclaimPass"
					rest := fn[j+2:]
					if k := strings.IndexByte(rest, '('); k > 0 {
						rest = rest[:k]
					}
					fn = strings.Trim(fn[:j], "(*") + "." + rest
				}
				frames = append(frames, fn)
			}
		}
		if len(frames) == 0 {
			continue
		}
		driverFrame := strings.Join(frames, " < ")
		state := lines[0]
		if i, j := strings.Index(state, "["), strings.Index(state, "]"); i >= 0 && j > i {
			state = state[i : j+1] // "[select]", "[chan receive, 3 minutes]"
		}
		counts[fmt.Sprintf("%s %s ... %s", state, lines[1], driverFrame)]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %3d x %s\n", counts[k], k)
	}
	return b.String()
}

func closedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// counts is the number of consumer processes started, and of those
// SIGKILLed by the harness.
func (f *chaosFleet) counts() (started, killed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.all {
		if p.killed {
			killed++
		}
	}
	return len(f.all), killed
}

// metrics sums the driver counters every consumer wrote (a killed one's
// last write is up to 200ms old, so the sums are approximate).
func (f *chaosFleet) metrics() map[string]int64 {
	f.mu.Lock()
	all := append([]*chaosProc(nil), f.all...)
	f.mu.Unlock()
	sum := map[string]int64{}
	for _, p := range all {
		b, err := os.ReadFile(p.metrics)
		if err != nil {
			continue // killed before its first write
		}
		var m map[string]int64
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func TestDriverStacksSummary(t *testing.T) {
	t.Parallel()
	dump := "SIGQUIT: quit\n\ngoroutine 7 [select]:\ngithub.com/pelwarden/pelwarden/driver.(*window).reserve(...)\n\t/x/window.go:160 +0x1\ngithub.com/pelwarden/pelwarden/driver.(*run).reclaimPass(...)\n\t/x/reclaim.go:80\ngithub.com/pelwarden/pelwarden/driver.(*run).reclaimLoop(...)\n\t/x/reclaim.go:40\n\n" +
		"goroutine 8 [IO wait]:\ninternal/poll.runtime_pollWait(...)\n\t/x/netpoll.go:1\n\n" +
		"goroutine 9 [select]:\ngithub.com/pelwarden/pelwarden/driver.(*window).reserve(...)\n\t/x/window.go:160 +0x1\ngithub.com/pelwarden/pelwarden/driver.(*run).reclaimLoop(...)\n\t/x/reclaim.go:40\n"
	got := driverStacks(dump)
	require.Contains(t, got, "    1 x [select] github.com/pelwarden/pelwarden/driver.(*window).reserve(...) ... window.reserve < run.reclaimPass < run.reclaimLoop\n")
	require.Contains(t, got, "    1 x [select] github.com/pelwarden/pelwarden/driver.(*window).reserve(...) ... window.reserve < run.reclaimLoop\n")
	require.NotContains(t, got, "netpoll")
}
