package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/ctxwait"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// testClusterOrderedChaos is TestOrderedChaos on the three-primary cluster
// (TestCluster/Parallel/OrderedChaos): the same scenario and checker, its
// 8 partitions spread over the primaries, the consumer processes on
// cluster clients seeded with the nodes' own addresses (no proxy: the
// nodes announce them). The faults: consumers SIGKILLed and replaced (one
// time in four stopped gracefully instead), and their connections cut
// every 0.2-1 s on every primary (CLIENT KILL of each connection named
// after the scenario, so the other tests sharing the cluster keep
// theirs), which makes owners lose leases and retake them and cuts
// lease_next and its MULTI/EXEC mid-flight. The run must show at least a
// SIGKILL, a graceful stop, the cuts their schedule guarantees and a
// connection cut (chaosDisableEnv's clientkill leaves the cuts out).
func testClusterOrderedChaos(t *testing.T, ctx context.Context, c *testserver.Cluster, rdb *redis.ClusterClient) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	sc := newOrderedChaos(t, ctx, rdb, "cochaos")
	sc.base.ClusterAddrs = c.Addrs()
	sc.run(t, ctx, "cluster", func(ctx context.Context, fleet *chaosFleet) (map[string]int64, []faultMinimum, []string) {
		in := &chaosInjector{fleet: fleet, keys: sc.keys, consumers: orderedChaosConsumers, counts: map[string]int64{}}
		off, _ := chaosDisabled() // in.run reports a bad value
		var wg sync.WaitGroup
		wg.Go(func() { in.run(ctx, faultKill) })
		if off&faultClientKill == 0 {
			wg.Go(func() {
				for ctxwait.Sleep(ctx, clusterCutLo+rand.N(clusterCutHi-clusterCutLo)) {
					n, err := cutNamedClients(ctx, rdb, sc.base.ClientName)
					if err != nil {
						if ctx.Err() == nil {
							in.fail("cut the consumers' connections: %v", err)
						}
						continue
					}
					in.count("client_kill", 1)
					in.count("client_kill_connections", n)
				}
			})
		}
		wg.Wait()
		counts, errs := in.result()
		// A cut is a CLIENT LIST and CLIENT KILLs on each primary, at once:
		// quick, and waiting for nothing else.
		mins := append(in.minimums(faultKill),
			periodicMinimum("client_kill", in.faultWindow(), clusterCutHi+chaosCallAllowance, "connection cuts"),
			faultMinimum{"client_kill_connections", 1, "the consumers hold connections to every primary throughout"})
		return counts, mins, errs
	})
}

// The consumers' connections are cut every clusterCutLo to clusterCutHi.
const (
	clusterCutLo = 200 * time.Millisecond
	clusterCutHi = time.Second
)

// cutNamedClients closes, on every primary, each connection named name
// (CLIENT LIST, then one CLIENT KILL ID per connection, pipelined), and
// returns how many it closed.
func cutNamedClients(ctx context.Context, rdb *redis.ClusterClient, name string) (int64, error) {
	var total atomic.Int64
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		list, err := node.ClientList(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLIENT LIST on %s: %w", node.Options().Addr, err)
		}
		pipe := node.Pipeline()
		kills := []*redis.Cmd{}
		for _, line := range strings.Split(list, "\n") {
			id, named := "", false
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
				named = named || f == "name="+name
			}
			if named && id != "" {
				kills = append(kills, pipe.Do(ctx, "CLIENT", "KILL", "ID", id))
			}
		}
		if len(kills) == 0 {
			return nil
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("CLIENT KILL on %s: %w", node.Options().Addr, err)
		}
		for _, k := range kills {
			n, err := k.Int64() // 0 for a connection that closed meanwhile
			if err != nil {
				return fmt.Errorf("CLIENT KILL on %s: %w", node.Options().Addr, err)
			}
			total.Add(n)
		}
		return nil
	})
	return total.Load(), err
}
