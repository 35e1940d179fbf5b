package integration_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// The client addresses of the two sides of the partition: the consumers
// and producers of a side dial from its address (every node listens on
// 127.0.0.1; the harness's own clients dial from 127.0.0.1 and are never
// cut off).
const (
	minorityIP = "127.0.0.2"
	majorityIP = "127.0.0.3"
)

// TestClusterPartition cuts a primary of a Redis Cluster (three primaries,
// one replica each) off the rest of the cluster together with half of the
// consumers and one producer, Jepsen style, lets the majority fail over,
// and heals the partition:
//
//   - the minority side is the stream's primary P, two consumers and a
//     producer; the majority side is the other five nodes (P's replica R
//     among them), two consumers and a producer. Nothing crosses between the
//     sides; each side works as far as its half of the cluster lets it;
//   - P keeps accepting writes for the node timeout (2 s), which it cannot
//     replicate: the minority producer's WAIT never confirms them, and they
//     are lost when P comes back as R's replica (Redis replicates
//     asynchronously; this is the loss the test makes certain). The cut
//     drops R's packets to P but not P's on the link R opened, so the
//     first writes after the cut may still reach R one way; once P's
//     retransmission timer fires (about 200 ms) nothing more does. The
//     producer's WAIT is therefore short (produceWait): it goes on writing
//     every ~120 ms for the whole window, and the later writes are lost.
//     A run with one write in the window (a WAIT of 1 s) lost none now and
//     then;
//   - the majority promotes R; its consumers reclaim what the minority
//     consumers held, after MinIdle, while those still run against P;
//   - after the heal every consumer runs again, without a Run error.
//
// At the end no WAIT-confirmed write is lost, every entry of the stream
// was acked after a durable handler success or is poison and sits in the
// dead-letter stream exactly once, the PEL is empty, and the log says what
// the minority consumers did meanwhile and how many entries ran twice.
//
// The partition is made of iptables rules on the host's OUTPUT chain (the
// nodes run in host network mode): packets from a node's cgroup to the
// other side's client and bus ports are dropped, and so are packets from a
// side's client address to the other side's ports. It needs root and the
// iptables cgroup match.
func TestClusterPartition(t *testing.T) {
	t.Parallel()
	part := newNetPartition(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := testserver.StartCluster(ctx, clusterImage(), testserver.ClusterOptions{ReplicasPerPrimary: 1})
	require.NoError(t, err, "start a Redis Cluster with replicas of %s", clusterImage())
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	shards, err := c.Shards(ctx)
	require.NoError(t, err)
	victim := shards[0]
	require.Len(t, victim.Replicas, 1)
	primary, replica := victim.Primary, victim.Replicas[0]

	admin := c.Client()
	t.Cleanup(func() { _ = admin.Close() })
	_, err = pelwarden.Load(ctx, admin)
	require.NoError(t, err)
	eventually(t, failoverWait, "the library replicated to "+replica.Addr(), func() (string, bool) {
		return libraryOn(ctx, nodeClient(t, replica))
	})

	sides := map[string]*partitionSide{
		"minority": {ip: minorityIP, m: &pelwardentest.Metrics{}},
		"majority": {ip: majorityIP, m: &pelwardentest.Metrics{}},
	}
	minority, majority := sides["minority"], sides["majority"]
	minority.nodes = []*testserver.ClusterNode{primary}
	for _, n := range c.Nodes() {
		if n != primary {
			majority.nodes = append(majority.nodes, n)
		}
	}
	settled := newSettledLog()
	for _, s := range sides {
		s.rdb = sideClient(c.Addrs(), s.ip)
		s.rdb.AddHook(settled)
		t.Cleanup(func() { _ = s.rdb.Close() })
	}

	fs := &failoverStream{shard: 0, k: clusterKeys(t, victim.Owns), app: admin, settled: settled,
		produced: map[string]bool{}, unconfirmed: map[string]bool{}, ok: map[string]int{},
		lostAcks: map[string]int{}, lostDLs: map[string]int{}}
	fs.runs = fs.k.Stream + ":runs"
	require.NoError(t, fs.createGroup(ctx))
	kit := pelwardentest.Use(t, admin)
	var consumers []*partitionConsumer
	for _, name := range []string{"minority", "majority"} {
		s := sides[name]
		f := kit.FixtureFor(t, fs.k).WithClient(s.rdb)
		for i := range 2 {
			pc := &partitionConsumer{name: fmt.Sprintf("%s-%d", name, i), side: s, fs: fs}
			pc.run = f.RunConsumer(driver.Config{
				Consumer: pc.name, Handler: driver.HandlerFunc(pc.handle),
				MaxDeliveries: driver.NoDeliveryLimit,
				MinIdle:       time.Second,
				Metrics:       s.m,
				Tuning:        driver.Tuning{ReclaimInterval: 200 * time.Millisecond, ReadBlock: 200 * time.Millisecond},
			})
			consumers = append(consumers, pc)
		}
	}
	stopProducers := make(chan struct{})
	var producers sync.WaitGroup
	producers.Go(func() { fs.produceWith(ctx, minority.rdb, stopProducers, 0) })
	producers.Go(func() { fs.produceWith(ctx, majority.rdb, stopProducers, 1_000_000) })
	t.Cleanup(func() {
		select {
		case <-stopProducers:
		default:
			close(stopProducers)
		}
		producers.Wait()
	})
	progress := func(what string, more int) {
		base := fs.successes()
		eventually(t, failoverWait, what, func() (string, bool) {
			n := fs.successes() - base
			return fmt.Sprintf("%d handler successes", n), n >= more
		})
	}
	progress("the stream consumed", 200)

	// The cut.
	require.NoError(t, part.cut(ctx, minority, majority))
	cutAt := time.Now()
	before := map[string]partitionCounts{"minority": minority.counts(), "majority": majority.counts()}
	replicaClient := nodeClient(t, replica)
	eventually(t, failoverWait, "the replica "+replica.Addr()+" promoted by the majority", func() (string, bool) {
		info, err := replicaClient.Info(ctx, "replication").Result()
		if err != nil {
			return err.Error(), false
		}
		return "still a replica", strings.Contains(info, "role:master")
	})
	promotion := time.Since(cutAt)
	primaryClient := nodeClient(t, primary)
	eventually(t, failoverWait, "the cut-off primary "+primary.Addr()+" sees its cluster down", func() (string, bool) {
		info, err := primaryClient.ClusterInfo(ctx).Result()
		if err != nil {
			return err.Error(), false
		}
		return "cluster_state still ok", strings.Contains(info, "cluster_state:fail")
	})
	// The majority works on: its consumers reach the new primary and take
	// over what the minority consumers held (after MinIdle).
	eventually(t, failoverWait, "the majority's consumers on the new primary", func() (string, bool) {
		cs, err := replicaClient.XInfoConsumers(ctx, fs.k.Stream, fs.k.Group).Result()
		if err != nil {
			return err.Error(), false
		}
		fresh := 0
		for _, c := range cs {
			if strings.HasPrefix(c.Name, "majority-") && c.Idle < time.Second {
				fresh++
			}
		}
		return fmt.Sprintf("consumers: %+v", cs), fresh == 2
	})
	// The majority takes over what the minority's consumers held (idle on
	// the new primary since the cut), while those still run on the old one.
	eventually(t, failoverWait, "the majority's consumers reclaiming entries while the partition lasts", func() (string, bool) {
		n := majority.counts().claimed - before["majority"].claimed
		return fmt.Sprintf("%d claimed", n), n > 0
	})
	time.Sleep(2 * time.Second) // both sides run on, cut off from each other
	during := map[string]partitionCounts{"minority": minority.counts(), "majority": majority.counts()}

	// The heal: the old primary comes back as a replica of the new one.
	require.NoError(t, part.heal())
	healedAt := time.Now()
	require.NoError(t, c.Wait(ctx))
	after, err := c.Shards(ctx)
	require.NoError(t, err)
	rejoined := false
	for _, s := range after {
		if s.Primary == replica {
			for _, r := range s.Replicas {
				rejoined = rejoined || r == primary
			}
		}
	}
	require.True(t, rejoined, "the old primary %s rejoined as a replica of %s", primary.Addr(), replica.Addr())
	for _, pc := range consumers {
		pc.markHealed()
	}
	eventually(t, failoverWait, "every consumer handling entries again after the heal", func() (string, bool) {
		for _, pc := range consumers {
			if pc.successesSinceHeal() == 0 {
				return pc.name + " has not succeeded since the heal", false
			}
		}
		return "", true
	})
	resumed := time.Since(healedAt)
	progress("the stream consumed after the heal", 200)
	close(stopProducers)
	producers.Wait()

	lib := pelwarden.NewLibrary(admin)
	eventually(t, failoverWait, "the stream drained", func() (string, bool) { return fs.drained(ctx, admin, lib) })
	for _, pc := range consumers {
		require.NoError(t, pc.run.Stop(), "%s: Run's error", pc.name)
	}
	r := fs.verify(t, ctx, admin)
	require.Positive(t, r.unconfirmedLost, "writes the cut-off primary accepted were lost (the partition lost data); stream %s: %s", fs.k.Stream, r)
	end := map[string]partitionCounts{"minority": minority.counts(), "majority": majority.counts()}
	t.Logf("partition of %s with 2 consumers and a producer: %s promoted %v after the cut; every consumer handling again %v after the heal",
		primary.Addr(), replica.Addr(), promotion.Round(100*time.Millisecond), resumed.Round(100*time.Millisecond))
	t.Logf("stream %s: %s", fs.k.Stream, r)
	for _, name := range []string{"minority", "majority"} {
		t.Logf("%s consumers while cut off: %s; after the heal: %s", name, during[name].sub(before[name]), end[name].sub(during[name]))
	}
}

// partitionSide is one side of the partition: its nodes, the address its
// clients dial from, its client and its consumers' metrics.
type partitionSide struct {
	nodes     []*testserver.ClusterNode
	ip        string
	rdb       *redis.ClusterClient
	m         *pelwardentest.Metrics
	cancelled atomic.Int64 // handler calls that saw their context cancelled
}

// partitionCounts is what a side's consumers did, from their metrics.
type partitionCounts struct {
	handled, handlerErrors, acked, lostOwnership, leaseExtended, commandErrors, claimed, cancelled int
}

func (s *partitionSide) counts() partitionCounts {
	return partitionCounts{
		handled: s.m.Total(driver.EventHandled), handlerErrors: s.m.Total(driver.EventHandlerError),
		acked: s.m.Total(driver.EventAcked), lostOwnership: s.m.Total(driver.EventLostOwnership),
		leaseExtended: s.m.Total(driver.EventLeaseExtended), commandErrors: s.m.Total(driver.EventCommandError),
		claimed: s.m.Total(driver.EventClaimed), cancelled: int(s.cancelled.Load()),
	}
}

func (c partitionCounts) sub(o partitionCounts) partitionCounts {
	return partitionCounts{c.handled - o.handled, c.handlerErrors - o.handlerErrors, c.acked - o.acked,
		c.lostOwnership - o.lostOwnership, c.leaseExtended - o.leaseExtended, c.commandErrors - o.commandErrors,
		c.claimed - o.claimed, c.cancelled - o.cancelled}
}

func (c partitionCounts) String() string {
	return fmt.Sprintf("%d handled (%d handler errors: durable success records not confirmed), %d acked, %d acks refused as owned elsewhere (lost ownership), "+
		"%d lease extensions, %d claimed, %d handlers cancelled, %d command errors",
		c.handled, c.handlerErrors, c.acked, c.lostOwnership, c.leaseExtended, c.claimed, c.cancelled, c.commandErrors)
}

// partitionConsumer is one consumer of the partition test.
type partitionConsumer struct {
	name string
	side *partitionSide
	fs   *failoverStream
	run  *pelwardentest.Consumer

	mu          sync.Mutex
	healed      bool
	sinceHealed int
}

// handle takes a little while (so entries are in hand at the cut), then
// records its success durably through its side's client.
func (pc *partitionConsumer) handle(ctx context.Context, m *driver.Message) error {
	select {
	case <-ctx.Done():
		pc.side.cancelled.Add(1)
		return ctx.Err()
	case <-time.After(5 * time.Millisecond):
	}
	if err := pc.fs.handleWith(ctx, pc.side.rdb, m); err != nil {
		if ctx.Err() != nil {
			pc.side.cancelled.Add(1)
		}
		return err
	}
	pc.mu.Lock()
	if pc.healed {
		pc.sinceHealed++
	}
	pc.mu.Unlock()
	return nil
}

func (pc *partitionConsumer) markHealed() {
	pc.mu.Lock()
	pc.healed = true
	pc.mu.Unlock()
}

func (pc *partitionConsumer) successesSinceHeal() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.sinceHealed
}

// sideClient is a cluster client whose connections come from ip.
func sideClient(addrs []string, ip string) *redis.ClusterClient {
	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second,
	})
}

// netPartition is a chain of iptables rules of its own, jumped to from the
// host's OUTPUT chain; heal empties it, and the test's cleanup removes it.
type netPartition struct{ chain string }

func newNetPartition(t *testing.T) *netPartition {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv(testserver.EnvRequireDocker) != "" {
			t.Fatal("the partition test needs root (iptables)")
		}
		t.Skip("the partition test needs root (iptables)")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	p := &netPartition{chain: "PWPART-" + hex.EncodeToString(b)}
	require.NoError(t, iptables("-N", p.chain))
	require.NoError(t, iptables("-I", "OUTPUT", "-j", p.chain))
	t.Cleanup(func() {
		require.NoError(t, iptables("-D", "OUTPUT", "-j", p.chain))
		require.NoError(t, iptables("-F", p.chain))
		require.NoError(t, iptables("-X", p.chain))
	})
	return p
}

// cut drops every packet between the sides: from a node of one side to a
// port of the other's nodes, and from a side's client address to a port of
// the other's nodes.
func (p *netPartition) cut(ctx context.Context, a, b *partitionSide) error {
	for _, pair := range [][2]*partitionSide{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		var ports []string
		for _, n := range to.nodes {
			ports = append(ports, strconv.Itoa(n.Port), strconv.Itoa(n.BusPort))
		}
		dports := strings.Join(ports, ",")
		for _, n := range from.nodes {
			cg, err := nodeCgroup(ctx, n)
			if err != nil {
				return err
			}
			if err := iptables("-A", p.chain, "-p", "tcp", "-m", "cgroup", "--path", cg, "-m", "multiport", "--dports", dports, "-j", "DROP"); err != nil {
				return err
			}
		}
		if err := iptables("-A", p.chain, "-s", from.ip, "-p", "tcp", "-m", "multiport", "--dports", dports, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

func (p *netPartition) heal() error { return iptables("-F", p.chain) }

// nodeCgroup is the cgroup v2 path of a node's server process.
func nodeCgroup(ctx context.Context, n *testserver.ClusterNode) (string, error) {
	pid, err := n.PID(ctx)
	if err != nil {
		return "", err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return path, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 path for node %s (pid %d)", n.Addr(), pid)
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
