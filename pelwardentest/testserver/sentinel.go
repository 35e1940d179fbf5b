package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
)

// DefaultMasterName is the name the sentinels of a Sentinel monitor the
// primary under when SentinelOptions.MasterName is "".
const DefaultMasterName = "pelwarden"

// SentinelOptions adjust a Sentinel deployment. The zero value is a primary
// with two replicas watched by three sentinels (quorum 2).
type SentinelOptions struct {
	// Replicas of the primary. Defaults to 2.
	Replicas int
	// Sentinels watching it. Defaults to 3; the quorum is a majority.
	Sentinels int
	// MasterName the sentinels know the primary by. Defaults to
	// DefaultMasterName.
	MasterName string
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// primary must be unreachable before a failover starts. Defaults to 2 s.
	DownAfter time.Duration
	// Args are extra server flags given to the primary and the replicas.
	Args []string
}

func (o SentinelOptions) withDefaults() (SentinelOptions, error) {
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.MasterName == "" {
		o.MasterName = DefaultMasterName
	}
	if o.DownAfter == 0 {
		o.DownAfter = 2 * time.Second
	}
	if o.Replicas < 0 || o.Sentinels < 1 || o.DownAfter < 0 {
		return o, fmt.Errorf("testserver: SentinelOptions: want Replicas >= 0, Sentinels >= 1 and DownAfter >= 0, got %+v", o)
	}
	o.Args = slices.Clone(o.Args)
	return o, nil
}

// Sentinel is a primary, its replicas and the sentinels watching them, each
// a container in host network mode listening on its own free loopback port
// (like Cluster), so every address the sentinels hand out is 127.0.0.1:port
// and reachable from the tests as it is. Close removes every container.
type Sentinel struct {
	// Image every server and sentinel runs (a sentinel is the same
	// redis-server binary started with --sentinel).
	Image string
	// MasterName is the name the sentinels monitor the primary under.
	MasterName string
	// Servers are the data nodes in start order: the first started as the
	// primary, the others as its replicas. Roles change in a failover; see
	// Primary.
	Servers []*ClusterNode
	// Sentinels are the sentinel processes.
	Sentinels []*ClusterNode

	dir string // the sentinels' configuration files
}

// StartSentinel starts a primary, opts.Replicas replicas (--replicaof the
// primary) and opts.Sentinels sentinels (sentinel monitor MasterName with a
// majority quorum, down-after opts.DownAfter, failover-timeout 10 s), and
// waits until every replica's link is up and every sentinel knows every
// replica and every other sentinel. On error every container started is
// removed.
func StartSentinel(ctx context.Context, image string, opts SentinelOptions) (*Sentinel, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pelwarden-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s := &Sentinel{Image: image, MasterName: opts.MasterName, dir: dir}
	base := []string{"--bind", "127.0.0.1", "--protected-mode", "no", "--save", ""}
	server := func(extra ...string) loopbackSpec {
		return loopbackSpec{
			image: image,
			ports: 1,
			build: func(ports []int) ([]string, []testcontainers.ContainerFile, error) {
				args := append(append(append([]string{"--port", strconv.Itoa(ports[0])}, extra...), base...), opts.Args...)
				return args, nil, nil
			},
			ready: serverReady,
		}
	}
	n, _, err := startLoopback(ctx, server())
	if n != nil {
		s.Servers = append(s.Servers, n)
	}
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	primaryPort := n.Port
	started := func(ns []*ClusterNode, errs []error) error {
		for _, n := range ns {
			if n != nil {
				s.Servers = append(s.Servers, n)
			}
		}
		return errors.Join(errs...)
	}
	replicas := make([]*ClusterNode, opts.Replicas)
	errs := make([]error, opts.Replicas)
	var wg sync.WaitGroup
	for i := range opts.Replicas {
		wg.Go(func() {
			replicas[i], _, errs[i] = startLoopback(ctx, server("--replicaof", "127.0.0.1", strconv.Itoa(primaryPort)))
		})
	}
	wg.Wait()
	if err := started(replicas, errs); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.waitReplicas(ctx, s.Servers[0], opts.Replicas); err != nil {
		return nil, errors.Join(err, s.Close())
	}

	quorum := opts.Sentinels/2 + 1
	sentinels := make([]*ClusterNode, opts.Sentinels)
	errs = make([]error, opts.Sentinels)
	for i := range opts.Sentinels {
		wg.Go(func() {
			sentinels[i], _, errs[i] = startLoopback(ctx, loopbackSpec{
				image: image,
				ports: 1,
				build: func(ports []int) ([]string, []testcontainers.ContainerFile, error) {
					p := ports[0]
					conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", p))
					text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\n"+
						"sentinel monitor %s 127.0.0.1 %d %d\n"+
						"sentinel down-after-milliseconds %s %d\n"+
						"sentinel failover-timeout %s 10000\n"+
						"sentinel parallel-syncs %s 1\n",
						p, opts.MasterName, primaryPort, quorum, opts.MasterName, opts.DownAfter.Milliseconds(), opts.MasterName, opts.MasterName)
					if err := os.WriteFile(conf, []byte(text), 0o666); err != nil {
						return nil, nil, fmt.Errorf("testserver: %w", err)
					}
					files := []testcontainers.ContainerFile{{HostFilePath: conf, ContainerFilePath: "/sentinel/sentinel.conf", FileMode: 0o666}}
					return []string{"/sentinel/sentinel.conf", "--sentinel"}, files, nil
				},
				ready: sentinelReady,
			})
		})
	}
	wg.Wait()
	for _, n := range sentinels {
		if n != nil {
			s.Sentinels = append(s.Sentinels, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	if err := s.waitSentinels(ctx, opts.Replicas); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// The log lines a server and a sentinel print once they accept
// connections.
const (
	serverReady   = "Ready to accept connections"
	sentinelReady = "Sentinel ID is"
)

// SentinelAddrs returns every sentinel's address.
func (s *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// Client returns a new failover client (the sentinels find the primary);
// the caller closes it.
func (s *Sentinel) Client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs(),
		DialTimeout:   5 * time.Second,
		ReadTimeout:   10 * time.Second,
		WriteTimeout:  10 * time.Second,
	})
}

// Primary returns the data node the first answering sentinel names as the
// primary now.
func (s *Sentinel) Primary(ctx context.Context) (*ClusterNode, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		if sn.Stopped() {
			continue
		}
		sc := redis.NewSentinelClient(sn.options())
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		_ = sc.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", sn.Addr(), err))
			continue
		}
		for _, n := range s.Servers {
			if n.Addr() == strings.Join(addr, ":") {
				return n, nil
			}
		}
		return nil, fmt.Errorf("testserver: sentinel %s names %v, not a server of this deployment", sn.Addr(), addr)
	}
	return nil, fmt.Errorf("testserver: no sentinel names the primary: %w", errors.Join(errs...))
}

// waitReplicas waits until primary reports n connected replicas.
func (s *Sentinel) waitReplicas(ctx context.Context, primary *ClusterNode, n int) error {
	return poll(ctx, fmt.Sprintf("%d replicas of %s online", n, primary.Addr()), func() (string, bool) {
		info, err := primary.admin.Info(ctx, "replication").Result()
		if err != nil {
			return err.Error(), false
		}
		return info, hasLine(info, "connected_slaves:"+strconv.Itoa(n)) && strings.Count(info, "state=online") == n
	})
}

// waitSentinels waits until every sentinel knows the primary, its replicas
// and every other sentinel.
func (s *Sentinel) waitSentinels(ctx context.Context, replicas int) error {
	return poll(ctx, "sentinels to discover each other and the replicas", func() (string, bool) {
		for _, sn := range s.Sentinels {
			m, err := sn.admin.Do(ctx, "SENTINEL", "MASTER", s.MasterName).Result()
			if err != nil {
				return fmt.Sprintf("SENTINEL MASTER on %s: %v", sn.Addr(), err), false
			}
			f := flatMap(m)
			if f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(len(s.Sentinels)-1) {
				return fmt.Sprintf("sentinel %s knows %s replicas and %s other sentinels; want %d and %d",
					sn.Addr(), f["num-slaves"], f["num-other-sentinels"], replicas, len(s.Sentinels)-1), false
			}
		}
		return "", true
	})
}

// flatMap turns a SENTINEL MASTER reply (a flat name, value list under
// RESP2, a map under RESP3) into a map of strings.
func flatMap(v any) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
		}
	case map[any]any:
		for k, v := range m {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return out
}

// Close removes every container and the configuration files. It is safe
// to call more than once.
func (s *Sentinel) Close() error {
	nodes := slices.Concat(s.Sentinels, s.Servers)
	s.Sentinels, s.Servers = nil, nil
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = n.close() })
	}
	wg.Wait()
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
		s.dir = ""
	}
	return errors.Join(errs...)
}
