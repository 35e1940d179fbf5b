package driver

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// followTopology asks a cluster client for a fresh slot map after a call
// failed in a way that suggests its map is stale. go-redis reloads the map
// by itself only on MOVED, ASK and READONLY replies and every
// ClusterOptions.ClusterStateReloadInterval (60 s by default): after a
// primary dies, nothing answers MOVED, so every call on its slots would keep
// dialing the dead node until the periodic reload, long after its replica
// was promoted. The reload is lazy (in the background, coalesced by
// go-redis, with a 200 ms cooldown) and the driver's retries are spaced by
// backoff, so it costs at most a few CLUSTER SLOTS per second.
func followTopology(rdb redis.UniversalClient, err error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok && staleTopology(err) {
		cc.ReloadState(context.Background())
	}
}

// staleTopology reports errors after which a cluster's slot map may have
// changed (pelwarden.ClassStaleTopology): the node did not answer
// (connection refused or reset, a timeout: it may be dead and its replica
// promoted), or the server said the cluster is reconfiguring.
func staleTopology(err error) bool { return pelwarden.Classify(err) == pelwarden.ClassStaleTopology }
