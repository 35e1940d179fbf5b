package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The servers of a Cluster and a Sentinel deployment run in host network
// mode, each on loopback ports chosen here. A chosen port is free when it is
// chosen, not reserved: until the server binds it, anything else on the
// machine may take it. Two things do so all the time on a machine that runs
// tests in parallel: the kernel, for the source port of every outgoing
// connection, and Docker, for every published port of another test's
// container; both pick from the ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default). A server that
// loses the race exits at once ("Address already in use"), which made
// TestCluster fail now and then.
//
// So ports are picked at random below the ephemeral range, where neither
// picks, and a server that still finds its port taken (another test process
// picked the same one in the same instant) is started again on new ports, at
// most portAttempts times in all.

// portAttempts bounds how often a server is started on new ports after it
// found one taken.
const portAttempts = 5

// lowestPort is the lowest port picked: above the well-known and the usual
// fixed service ports.
const lowestPort = 10000

// freePorts returns n distinct ports on 127.0.0.1 that are free now, picked
// at random below the ephemeral range.
func freePorts(n int) ([]int, error) {
	highest := ephemeralLow() - 1
	if highest-lowestPort < 4*n {
		return nil, fmt.Errorf("testserver: no room for %d ports between %d and the ephemeral range", n, lowestPort)
	}
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("testserver: found only %d of %d free ports between %d and %d", len(ports), n, lowestPort, highest)
		}
		p := lowestPort + rand.IntN(highest-lowestPort+1)
		if slices.Contains(ports, p) || !portFree(p) {
			continue
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// portFree reports whether 127.0.0.1:p can be listened on now.
func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range
// (32768 where it can't be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= lowestPort {
		return 32768
	}
	return low
}

// loopbackSpec describes one server container of a deployment on loopback
// ports.
type loopbackSpec struct {
	image string
	// ports is the number of ports the server listens on (1, or 2 for a
	// cluster node and its bus).
	ports int
	// build returns the server's command and files for its ports.
	build func(ports []int) ([]string, []testcontainers.ContainerFile, error)
	// ready is the log line the server prints once it accepts connections.
	ready string
	// pick returns the ports of one attempt; nil means freePorts (the
	// tests make it pick a taken port).
	pick func(n int) ([]int, error)
}

// startLoopback starts spec's server in host network mode on free loopback
// ports, waits for its ready line, then until it answers PING. It returns
// the node with its ports (the first one is Port); a server that found a
// port taken is started again on new ports.
func startLoopback(ctx context.Context, spec loopbackSpec) (*ClusterNode, []int, error) {
	pick := spec.pick
	if pick == nil {
		pick = freePorts
	}
	var errs []error
	for range portAttempts {
		ports, err := pick(spec.ports)
		if err != nil {
			return nil, nil, err
		}
		args, files, err := spec.build(ports)
		if err != nil {
			return nil, nil, err
		}
		ctr, err := testcontainers.Run(ctx, spec.image,
			testcontainers.WithCmd(args...),
			testcontainers.WithFiles(files...),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.NetworkMode = "host" }),
			testcontainers.WithWaitStrategyAndDeadline(60*time.Second, wait.ForLog(spec.ready)),
		)
		if err != nil {
			log := containerLog(ctr)
			if ctr != nil {
				_ = ctr.Terminate(context.Background())
			}
			err = fmt.Errorf("testserver: start %s on ports %v: %w%s%s", spec.image, ports, err, imageHint(spec.image), logTail(log))
			if portTaken(log) && ctx.Err() == nil {
				errs = append(errs, err)
				continue
			}
			return nil, nil, err
		}
		n := &ClusterNode{Port: ports[0], container: ctr}
		n.admin = redis.NewClient(n.options())
		return n, ports, n.waitPing(ctx)
	}
	return nil, nil, fmt.Errorf("testserver: every port picked for %s was taken before the server bound it, %d times: %w", spec.image, portAttempts, errors.Join(errs...))
}

// portTaken reports whether a server's log says it could not listen because
// its address was in use (EADDRINUSE, as strerror prints it).
func portTaken(log string) bool {
	return strings.Contains(log, "Address already in use")
}

// containerLog returns what the container printed, or "" when there is no
// container or its log can't be read.
func containerLog(ctr testcontainers.Container) string {
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 64<<10))
	if err != nil && len(b) == 0 {
		return ""
	}
	return string(b)
}

// logTail formats the last lines of a server's log for an error message.
func logTail(log string) string {
	log = strings.TrimSpace(log)
	if log == "" {
		return ""
	}
	lines := strings.Split(log, "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return "; its log ends: " + strings.Join(lines, " | ")
}
