package ops

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// Discovery defaults.
const (
	// DefaultScanKeys is the default of DiscoverOptions.MaxKeys.
	DefaultScanKeys = 200_000
	// DefaultScanCount is the default of DiscoverOptions.Count.
	DefaultScanCount = 1000
)

// DiscoverOptions are the options of DiscoverStreams.
type DiscoverOptions struct {
	// Match is a glob (SCAN MATCH syntax) the stream names must match.
	// Defaults to "*". A pattern without glob characters names one key,
	// checked with TYPE instead of a scan.
	Match string
	// MaxKeys bounds the keys a discovery walks on each primary (SCAN
	// calls of Count keys until MaxKeys): the keyspace past it is not
	// seen (Discovery.Complete false). Defaults to DefaultScanKeys.
	MaxKeys int64
	// Count is SCAN's COUNT hint. Defaults to DefaultScanCount.
	Count int64
}

// Discovery is what DiscoverStreams found.
type Discovery struct {
	// Streams found, sorted, each once.
	Streams []string
	// Complete: every primary's keyspace was scanned to the end.
	Complete bool
}

// DiscoverStreams lists the keys of type stream matching o.Match with SCAN
// ... TYPE stream on every primary (ForEachMaster on a cluster client; the
// client itself otherwise), walking at most o.MaxKeys keys per primary.
func DiscoverStreams(ctx context.Context, rdb redis.UniversalClient, o DiscoverOptions) (*Discovery, error) {
	if o.Match == "" {
		o.Match = "*"
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultScanKeys
	}
	if o.Count <= 0 {
		o.Count = DefaultScanCount
	}
	if !strings.ContainsAny(o.Match, `*?[\`) {
		t, err := rdb.Type(ctx, o.Match).Result()
		if err != nil {
			return nil, commandError("TYPE", o.Match, err)
		}
		out := &Discovery{Streams: []string{}, Complete: true}
		if t == "stream" {
			out.Streams = append(out.Streams, o.Match)
		}
		return out, nil
	}
	keys, complete, err := scanType(ctx, rdb, o.Match, "stream", o.MaxKeys, o.Count)
	if err != nil {
		return nil, err
	}
	return &Discovery{Streams: keys, Complete: complete}, nil
}

// scanType lists the keys of type typ matching match with SCAN ... TYPE on
// every primary (ForEachMaster on a cluster client; the client itself
// otherwise), walking at most maxKeys keys per primary: sorted, each once,
// and whether every primary was scanned to the end.
func scanType(ctx context.Context, rdb redis.UniversalClient, match, typ string, maxKeys, count int64) ([]string, bool, error) {
	var mu sync.Mutex
	seen := map[string]bool{}
	complete := true
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for walked := int64(0); ; walked += count {
			if walked >= maxKeys {
				mu.Lock()
				complete = false
				mu.Unlock()
				return nil
			}
			keys, next, err := c.ScanType(ctx, cursor, match, count, typ).Result()
			if err != nil {
				return commandError("SCAN", "", err)
			}
			mu.Lock()
			for _, k := range keys {
				seen[k] = true
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, false, err
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, complete, nil
}

// DiscoverLimits lists the names of the limits set on the server (the
// hashes named by pelwarden.LimitKeysFor), walking at most maxKeys keys
// per primary (0: DefaultScanKeys); complete reports whether every
// primary was scanned to the end.
func DiscoverLimits(ctx context.Context, rdb redis.UniversalClient, maxKeys int64) (names []string, complete bool, err error) {
	if maxKeys <= 0 {
		maxKeys = DefaultScanKeys
	}
	prefix, _ := pelwarden.LimitKeysFor("")
	prefix = strings.TrimSuffix(prefix, "}")
	keys, complete, err := scanType(ctx, rdb, prefix+"*}", "hash", maxKeys, DefaultScanCount)
	if err != nil {
		return nil, false, err
	}
	names = []string{}
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, prefix); ok && strings.HasSuffix(name, "}") {
			names = append(names, strings.TrimSuffix(name, "}"))
		}
	}
	return names, complete, nil
}
