package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
)

// SlotCount is the number of hash slots of a Redis Cluster.
const SlotCount = 16384

// DefaultClusterPrimaries is the number of primaries of a cluster when
// ClusterOptions.Primaries is 0.
const DefaultClusterPrimaries = 3

// clusterWait bounds every wait of this file (a node to answer, the cluster
// to converge). The machines the tests run on are small and busy.
const clusterWait = 90 * time.Second

// ClusterOptions adjust a cluster. The zero value is three primaries without
// replicas.
type ClusterOptions struct {
	// Primaries is the number of primary nodes; the 16384 slots are split
	// evenly over them, in node order. Defaults to DefaultClusterPrimaries.
	Primaries int
	// ReplicasPerPrimary is the number of replicas of each primary.
	// Defaults to 0. With 1, every primary has a replica to promote in a
	// failover test (stop the primary's node: the replica takes over after
	// the cluster node timeout, 2 s).
	ReplicasPerPrimary int
	// Args are extra server flags given to every node, e.g. "--appendonly",
	// "yes".
	Args []string
}

func (o ClusterOptions) withDefaults() (ClusterOptions, error) {
	if o.Primaries == 0 {
		o.Primaries = DefaultClusterPrimaries
	}
	if o.Primaries < 1 || o.Primaries > SlotCount {
		return o, fmt.Errorf("testserver: ClusterOptions.Primaries must be between 1 and %d, got %d", SlotCount, o.Primaries)
	}
	if o.ReplicasPerPrimary < 0 {
		return o, fmt.Errorf("testserver: ClusterOptions.ReplicasPerPrimary must not be negative, got %d", o.ReplicasPerPrimary)
	}
	o.Args = slices.Clone(o.Args)
	return o, nil
}

// Cluster is a Redis Cluster whose nodes are containers in host network mode,
// each listening on its own free loopback port, so every address the cluster
// hands out (CLUSTER SLOTS, MOVED) is 127.0.0.1:port and reachable from the
// tests without any address translation.
//
// It is safe for concurrent use. Close removes every container, those added
// by AddPrimary included; nothing else reaps them (Ryuk is disabled where
// pelwarden is tested).
type Cluster struct {
	// Image every node runs.
	Image string

	args []string

	mu    sync.Mutex
	nodes []*ClusterNode
}

// ClusterNode is one node of a Cluster, or one server or sentinel of a
// Sentinel deployment (ID and BusPort then unset): a container in host
// network mode listening on 127.0.0.1:Port.
type ClusterNode struct {
	// ID is the node's cluster id (CLUSTER MYID). It survives Stop and
	// Start: the node keeps its nodes-<port>.conf in the container.
	ID string
	// Port is the client port on 127.0.0.1.
	Port int
	// BusPort is the cluster bus port on 127.0.0.1 (--cluster-port; chosen
	// free like Port instead of the default Port+10000, which may be taken
	// or above 65535).
	BusPort int

	container *testcontainers.DockerContainer
	admin     *redis.Client // the harness's own connection, closed by Close

	mu      sync.Mutex
	stopped bool
}

// StartCluster starts opts.Primaries primaries (and their replicas) from
// image, forms the cluster from Go and waits for it (see Wait). The nodes are
// formed with CLUSTER MEET (every node meets the first), CLUSTER
// ADDSLOTSRANGE on each primary (an even split of 0..16383, in node order;
// Redis 7.0+) and CLUSTER REPLICATE (replica k follows primary k mod
// Primaries). On error, every container already started is removed.
//
// Each node runs with --port P --cluster-enabled yes --cluster-config-file
// nodes-P.conf --cluster-node-timeout 2000 --cluster-port B
// --cluster-announce-ip 127.0.0.1 --protected-mode no --save ""
// --bind 127.0.0.1, plus opts.Args; P and B are free loopback ports.
func StartCluster(ctx context.Context, image string, opts ClusterOptions) (*Cluster, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Image: image, args: opts.Args}
	total := opts.Primaries * (1 + opts.ReplicasPerPrimary)
	nodes, err := c.startNodes(ctx, total)
	c.nodes = nodes
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	if err := c.form(ctx, opts); err != nil {
		return nil, errors.Join(fmt.Errorf("testserver: form cluster of %s: %w", image, err), c.Close())
	}
	return c, nil
}

// startNodes starts n nodes concurrently. It returns the nodes that started
// even on error, so the caller can remove them.
func (c *Cluster) startNodes(ctx context.Context, n int) ([]*ClusterNode, error) {
	nodes := make([]*ClusterNode, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			nodes[i], errs[i] = c.startNode(ctx)
		})
	}
	wg.Wait()
	var started []*ClusterNode
	for _, nd := range nodes {
		if nd != nil {
			started = append(started, nd)
		}
	}
	return started, errors.Join(errs...)
}

// startNode starts a node on a free client port and a free bus port (see
// loopback.go).
func (c *Cluster) startNode(ctx context.Context) (*ClusterNode, error) {
	n, ports, err := startLoopback(ctx, loopbackSpec{
		image: c.Image,
		ports: 2,
		build: func(ports []int) ([]string, []testcontainers.ContainerFile, error) {
			p, b := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
			return append([]string{
				"--port", p,
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes-" + p + ".conf",
				"--cluster-node-timeout", "2000",
				"--cluster-port", b,
				"--cluster-announce-ip", "127.0.0.1",
				"--protected-mode", "no",
				"--save", "",
				"--bind", "127.0.0.1",
			}, c.args...), nil, nil
		},
		ready: serverReady,
	})
	if err != nil {
		return n, fmt.Errorf("testserver: start cluster node: %w", err)
	}
	n.BusPort = ports[1]
	id, err := n.admin.ClusterMyID(ctx).Result()
	if err != nil {
		return n, fmt.Errorf("testserver: CLUSTER MYID on %s: %w", n.Addr(), err)
	}
	n.ID = id
	return n, nil
}

// form meets the nodes, assigns the slots and the replicas, and waits.
func (c *Cluster) form(ctx context.Context, opts ClusterOptions) error {
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if err := n.meet(ctx, first); err != nil {
			return err
		}
	}
	if err := c.waitMeshed(ctx); err != nil {
		return err
	}
	primaries, replicas := c.nodes[:opts.Primaries], c.nodes[opts.Primaries:]
	for i, p := range primaries {
		lo, hi := i*SlotCount/len(primaries), (i+1)*SlotCount/len(primaries)-1
		if err := p.admin.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, p.Addr(), err)
		}
	}
	for k, r := range replicas {
		p := primaries[k%len(primaries)]
		if err := r.admin.ClusterReplicate(ctx, p.ID).Err(); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE %s on %s: %w", p.ID, r.Addr(), err)
		}
	}
	return c.Wait(ctx)
}

// meet introduces n to the cluster through seed (CLUSTER MEET with the bus
// port, Redis 7.0+).
func (n *ClusterNode) meet(ctx context.Context, seed *ClusterNode) error {
	if err := n.admin.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", seed.Port, seed.BusPort).Err(); err != nil {
		return fmt.Errorf("CLUSTER MEET %s on %s: %w", seed.Addr(), n.Addr(), err)
	}
	return nil
}

// Addrs returns the address of every node, stopped ones included, in start
// order (nodes added by AddPrimary last).
func (c *Cluster) Addrs() []string {
	nodes := c.Nodes()
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes returns every node, stopped ones included, in start order.
func (c *Cluster) Nodes() []*ClusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Node returns the node listening at addr, or nil.
func (c *Cluster) Node(addr string) *ClusterNode {
	for _, n := range c.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Client returns a new cluster client seeded with every node's address; the
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        c.Addrs(),
		DialTimeout:  5 * time.Second,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	})
}

// SlotRange is an inclusive range of hash slots.
type SlotRange struct {
	Start, End int
}

// Contains reports whether slot is in r.
func (r SlotRange) Contains(slot int) bool { return slot >= r.Start && slot <= r.End }

// Shard is a primary, its replicas and the slots it serves.
type Shard struct {
	Primary  *ClusterNode
	Replicas []*ClusterNode
	// Ranges are the primary's slot ranges, in slot order.
	Ranges []SlotRange
}

// Owns reports whether the shard serves slot.
func (s Shard) Owns(slot int) bool {
	for _, r := range s.Ranges {
		if r.Contains(slot) {
			return true
		}
	}
	return false
}

// Shards returns the cluster's shards as a running node sees them, in order
// of their first slot: primaries and slot ranges from CLUSTER SLOTS (what
// go-redis's ClusterClient uses), replicas that are not failed from CLUSTER
// NODES (CLUSTER SLOTS leaves out a replica until its primary has sent it
// anything). A primary without slots is not a shard, as for go-redis's
// ForEachMaster. Call Wait first after a change.
func (c *Cluster) Shards(ctx context.Context) ([]Shard, error) {
	n, err := c.runningNode()
	if err != nil {
		return nil, err
	}
	slots, err := n.admin.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("testserver: CLUSTER SLOTS on %s: %w", n.Addr(), err)
	}
	view, err := clusterNodes(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var out []Shard
	index := map[string]int{}
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		p := c.Node(s.Nodes[0].Addr)
		if p == nil {
			return nil, fmt.Errorf("testserver: CLUSTER SLOTS names %s, not a node of this cluster", s.Nodes[0].Addr)
		}
		i, ok := index[p.Addr()]
		if !ok {
			i = len(out)
			index[p.Addr()] = i
			out = append(out, Shard{Primary: p})
			for _, l := range view {
				if l.primary == p.ID && !l.has("fail") {
					if r := c.Node(l.addr); r != nil {
						out[i].Replicas = append(out[i].Replicas, r)
					}
				}
			}
		}
		out[i].Ranges = append(out[i].Ranges, SlotRange{Start: int(s.Start), End: int(s.End)})
	}
	return out, nil
}

// Wait waits until every running node reports cluster_state:ok with all
// 16384 slots served, knows every node, has the same view of the cluster
// (the primary of each slot range, each node's role, primary and failed
// state), and every running replica's link to its primary is up. Use it
// after Stop, Start or AddPrimary.
func (c *Cluster) Wait(ctx context.Context) error {
	return poll(ctx, "cluster to converge", func() (string, bool) {
		nodes := c.Nodes()
		var want string
		for _, n := range nodes {
			if n.Stopped() {
				continue
			}
			info, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Sprintf("CLUSTER INFO on %s: %v", n.Addr(), err), false
			}
			for _, f := range []string{
				"cluster_state:ok",
				"cluster_slots_assigned:" + strconv.Itoa(SlotCount),
				"cluster_slots_ok:" + strconv.Itoa(SlotCount),
				"cluster_known_nodes:" + strconv.Itoa(len(nodes)),
			} {
				if !hasLine(info, f) {
					return fmt.Sprintf("%s: want %s, CLUSTER INFO says:\n%s", n.Addr(), f, info), false
				}
			}
			m, err := clusterView(ctx, n)
			if err != nil {
				return err.Error(), false
			}
			if want == "" {
				want = m
			} else if m != want {
				return fmt.Sprintf("views differ:\n%s\n%s", want, m), false
			}
			repl, err := n.admin.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Sprintf("INFO replication on %s: %v", n.Addr(), err), false
			}
			// Only a replica reports master_link_status.
			if strings.Contains(repl, "master_link_status:") && !hasLine(repl, "master_link_status:up") {
				return fmt.Sprintf("replica %s: link to its primary is not up", n.Addr()), false
			}
		}
		return "", true
	})
}

// waitMeshed waits until every running node knows every node, none of them
// still in handshake.
func (c *Cluster) waitMeshed(ctx context.Context) error {
	return poll(ctx, "nodes to meet", func() (string, bool) {
		nodes := c.Nodes()
		for _, n := range nodes {
			if n.Stopped() {
				continue
			}
			view, err := clusterNodes(ctx, n)
			if err != nil {
				return err.Error(), false
			}
			known := map[string]bool{}
			for _, l := range view {
				if !l.has("handshake") && !l.has("noaddr") {
					known[l.id] = true
				}
			}
			for _, m := range nodes {
				if !known[m.ID] {
					return fmt.Sprintf("%s does not know %s (%s) yet", n.Addr(), m.Addr(), m.ID), false
				}
			}
		}
		return "", true
	})
}

// clusterView renders what n knows of the cluster canonically: one line per
// slot range with its primary (CLUSTER SLOTS), then one line per node with
// its role, primary and failed state (CLUSTER NODES), sorted. Link states
// and other per-observer details are left out.
func clusterView(ctx context.Context, n *ClusterNode) (string, error) {
	slots, err := n.admin.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS on %s: %v", n.Addr(), err)
	}
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var b strings.Builder
	for _, s := range slots {
		primary := ""
		if len(s.Nodes) > 0 {
			primary = s.Nodes[0].Addr
		}
		fmt.Fprintf(&b, "%d-%d %s\n", s.Start, s.End, primary)
	}
	view, err := clusterNodes(ctx, n)
	if err != nil {
		return "", err
	}
	lines := make([]string, 0, len(view))
	for _, l := range view {
		role := "primary"
		if l.primary != "" {
			role = "replica of " + l.primary
		}
		state := ""
		switch {
		case l.has("fail"):
			state = " fail"
		case l.has("fail?"):
			state = " fail?"
		}
		lines = append(lines, fmt.Sprintf("%s %s %s%s", l.id, l.addr, role, state))
	}
	slices.Sort(lines)
	b.WriteString(strings.Join(lines, "\n"))
	return b.String(), nil
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr string
	flags    []string
	// primary is the id of the primary a replica follows, "" for a primary.
	primary string
}

func (l nodeLine) has(flag string) bool { return slices.Contains(l.flags, flag) }

// clusterNodes parses CLUSTER NODES on n.
func clusterNodes(ctx context.Context, n *ClusterNode) ([]nodeLine, error) {
	text, err := n.admin.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %v", n.Addr(), err)
	}
	var out []nodeLine
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		// <id> <ip:port@cport[,hostname]> <flags> <primary> ...
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		l := nodeLine{id: f[0], addr: addr, flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			l.primary = f[3]
		}
		out = append(out, l)
	}
	return out, nil
}

// AddPrimary starts a new empty node, introduces it to the cluster (CLUSTER
// MEET), makes it the owner of the slots of r, and waits for the cluster to
// converge. The slots must hold no keys: the method moves ownership only,
// it does not migrate data.
//
// Each slot moves like redis-cli's reshard, minus MIGRATE: CLUSTER SETSLOT
// IMPORTING on the new node and MIGRATING on the owner; CLUSTER
// COUNTKEYSINSLOT on the owner, which must be 0 (from here on the owner
// redirects writes of new keys in the slot with ASK, so the count cannot
// grow); then CLUSTER SETSLOT NODE <new> on the new node (which bumps its
// config epoch, so its claim wins over the old owner's everywhere), on the
// old owner and on every other node. CLUSTER DELSLOTS on the owner plus
// ADDSLOTS on the new node would not do: the other nodes keep the old owner,
// whose config epoch is higher than the new node's, and the slot would be
// unassigned on the owner meanwhile. A slot that holds keys is reported as
// an error, after its IMPORTING and MIGRATING states are cleared.
//
// The node stays in the cluster until Close.
func (c *Cluster) AddPrimary(ctx context.Context, r SlotRange) (*ClusterNode, error) {
	if r.Start < 0 || r.End >= SlotCount || r.Start > r.End {
		return nil, fmt.Errorf("testserver: AddPrimary: bad slot range %d-%d", r.Start, r.End)
	}
	seed, err := c.runningNode()
	if err != nil {
		return nil, err
	}
	nodes, err := c.startNodes(ctx, 1)
	c.mu.Lock()
	c.nodes = append(c.nodes, nodes...) // Close removes it whatever happens next
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	n := nodes[0]
	if err := n.meet(ctx, seed); err != nil {
		return nil, fmt.Errorf("testserver: AddPrimary: %w", err)
	}
	if err := c.waitMeshed(ctx); err != nil {
		return nil, fmt.Errorf("testserver: AddPrimary: %w", err)
	}
	shards, err := c.Shards(ctx)
	if err != nil {
		return nil, err
	}
	for slot := r.Start; slot <= r.End; slot++ {
		var owner *ClusterNode
		for _, s := range shards {
			if s.Owns(slot) {
				owner = s.Primary
			}
		}
		if owner == nil {
			return nil, fmt.Errorf("testserver: AddPrimary: slot %d has no owner", slot)
		}
		if err := c.moveEmptySlot(ctx, slot, owner, n); err != nil {
			return nil, fmt.Errorf("testserver: AddPrimary: %w", err)
		}
	}
	if err := c.Wait(ctx); err != nil {
		return nil, fmt.Errorf("testserver: AddPrimary: %w", err)
	}
	return n, nil
}

// moveEmptySlot moves the ownership of an empty slot from one primary to
// another; see AddPrimary.
func (c *Cluster) moveEmptySlot(ctx context.Context, slot int, from, to *ClusterNode) error {
	setslot := func(n *ClusterNode, args ...any) error {
		cmd := append([]any{"CLUSTER", "SETSLOT", slot}, args...)
		if err := n.admin.Do(ctx, cmd...).Err(); err != nil {
			return fmt.Errorf("CLUSTER SETSLOT %d %v on %s: %w", slot, args, n.Addr(), err)
		}
		return nil
	}
	if err := setslot(to, "IMPORTING", from.ID); err != nil {
		return err
	}
	if err := setslot(from, "MIGRATING", to.ID); err != nil {
		return errors.Join(err, setslot(to, "STABLE"))
	}
	keys, err := from.admin.ClusterCountKeysInSlot(ctx, slot).Result()
	if err == nil && keys > 0 {
		err = fmt.Errorf("slot %d holds %d keys on %s; only empty slots are moved", slot, keys, from.Addr())
	}
	if err != nil {
		return errors.Join(err, setslot(from, "STABLE"), setslot(to, "STABLE"))
	}
	if err := setslot(to, "NODE", to.ID); err != nil {
		return err
	}
	if err := setslot(from, "NODE", to.ID); err != nil {
		return err
	}
	for _, n := range c.Nodes() {
		if n == to || n == from || n.Stopped() {
			continue
		}
		if err := setslot(n, "NODE", to.ID); err != nil {
			return err
		}
	}
	return nil
}

// runningNode returns the first node that is not stopped.
func (c *Cluster) runningNode() (*ClusterNode, error) {
	for _, n := range c.Nodes() {
		if !n.Stopped() {
			return n, nil
		}
	}
	return nil, errors.New("testserver: every cluster node is stopped")
}

// Close removes every node's container. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ContainerID is the id of the node's container.
func (n *ClusterNode) ContainerID() string { return n.container.GetContainerID() }

// PID is the host process id of the node's server (its container's main
// process), for tools that act on it from the host: its cgroup (a firewall
// rule matching the node's traffic), its network namespace.
func (n *ClusterNode) PID(ctx context.Context) (int, error) {
	st, err := n.container.State(ctx)
	if err != nil {
		return 0, fmt.Errorf("testserver: state of node %s: %w", n.Addr(), err)
	}
	if !st.Running || st.Pid == 0 {
		return 0, fmt.Errorf("testserver: node %s is not running (%s)", n.Addr(), st.Status)
	}
	return st.Pid, nil
}

// Addr returns the node's address, 127.0.0.1:Port.
func (n *ClusterNode) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

func (n *ClusterNode) options() *redis.Options {
	return &redis.Options{
		Addr:         n.Addr(),
		DialTimeout:  5 * time.Second,
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	}
}

// Client returns a new client for this node alone; the caller closes it.
// Commands on keys of slots the node does not serve are answered MOVED.
func (n *ClusterNode) Client() *redis.Client { return redis.NewClient(n.options()) }

// Stopped reports whether Stop was called without a Start after it.
func (n *ClusterNode) Stopped() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stopped
}

// Stop stops the node's container (SIGTERM, then SIGKILL after 10 s). The
// other nodes mark it failed after the node timeout (2 s); a replica of a
// stopped primary is then promoted. Wait returns once that has happened.
func (n *ClusterNode) Stop(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	timeout := 10 * time.Second
	if err := n.container.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("testserver: stop node %s: %w", n.Addr(), err)
	}
	n.stopped = true
	return nil
}

// Kill crashes the node: its container gets SIGKILL at once, so the server
// has no chance to send its replicas what they have not received yet (Stop
// lets a Redis 7+ primary wait for its replicas to catch up first). The
// other nodes mark it failed after the node timeout (2 s); a replica of a
// killed primary is then promoted. Start brings it back.
func (n *ClusterNode) Kill(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("testserver: kill node %s: %w", n.Addr(), err)
	}
	defer p.Close()
	id := n.container.GetContainerID()
	if _, err := p.Client().ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("testserver: kill node %s: %w", n.Addr(), err)
	}
	n.stopped = true
	// SIGKILL is asynchronous: Start must find the container exited.
	return poll(ctx, "node "+n.Addr()+" to exit", func() (string, bool) {
		st, err := n.container.State(ctx)
		if err != nil {
			return err.Error(), false
		}
		if st.Running {
			return "still running", false
		}
		return "", true
	})
}

// Start starts a stopped (or killed) node's container again and waits until
// it answers PING. It keeps its id and rejoins the cluster (a former primary whose
// replica was promoted rejoins as a replica, empty: --save "" keeps no data).
// Call Cluster.Wait to wait for the cluster to converge.
func (n *ClusterNode) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.container.Start(ctx); err != nil {
		return fmt.Errorf("testserver: start node %s: %w", n.Addr(), err)
	}
	n.stopped = false
	return n.waitPing(ctx)
}

func (n *ClusterNode) waitPing(ctx context.Context) error {
	return poll(ctx, "node "+n.Addr()+" to answer PING", func() (string, bool) {
		if err := n.admin.Ping(ctx).Err(); err != nil {
			return err.Error(), false
		}
		return "", true
	})
}

func (n *ClusterNode) close() error {
	err := n.admin.Close()
	if terr := n.container.Terminate(context.Background()); terr != nil {
		err = errors.Join(err, fmt.Errorf("testserver: terminate cluster node %s: %w", n.Addr(), terr))
	}
	return err
}

// poll calls check every 100 ms until it reports done, ctx ends or
// clusterWait passes; the error then carries check's last explanation.
func poll(ctx context.Context, what string, check func() (why string, done bool)) error {
	ctx, cancel := context.WithTimeout(ctx, clusterWait)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		why, done := check()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: waiting for %s: %w; last: %s", what, ctx.Err(), why)
		case <-t.C:
		}
	}
}

// hasLine reports whether text (a CLUSTER INFO or INFO reply) has the line.
func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}
