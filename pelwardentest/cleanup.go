package pelwardentest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// issuedTags are the hash tags NewKeys handed out in this process and not
// yet cleaned up, each with the existing servers fixtures used them on.
// Only keys under these tags are ever removed.
var issuedTags sync.Map // string -> *taggedKeys

// taggedKeys are the existing servers holding keys under one tag.
type taggedKeys struct {
	mu      sync.Mutex
	servers []redis.UniversalClient
}

// issueTag records tag, made by NewKeys for t, and removes its keys from
// the existing servers fixtures used them on when t ends. That cleanup
// was registered first, so it runs after every one t registers later (the
// consumers the test started stop first).
func issueTag(t T, tag string) {
	e := &taggedKeys{}
	issuedTags.Store(tag, e)
	t.Cleanup(func() {
		issuedTags.Delete(tag)
		e.mu.Lock()
		servers := e.servers
		e.servers = nil
		e.mu.Unlock()
		for _, rdb := range servers {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			_, err := removeTagged(ctx, rdb, tag)
			cancel()
			if err != nil {
				t.Errorf("pelwardentest: remove the test's keys %s* from the server: %v", tag, err)
			}
		}
	})
}

// cleanupTimeout bounds removing one test's keys from one server.
const cleanupTimeout = time.Minute

// removeKeysAtCleanup makes k's keys removed from s when the test that made
// them (NewKeys) ends, when s is an existing server (EnvRedisURL,
// EnvClusterURL) rather than a container of this process: a server someone
// else runs must not fill up with the streams of every test run. Keys the
// caller named itself (not from NewKeys) are left alone.
func (s *Server) removeKeysAtCleanup(k Keys) {
	if !s.existing || !strings.HasPrefix(k.Stream, "{") {
		return
	}
	end := strings.IndexByte(k.Stream, '}')
	if end < 0 {
		return
	}
	v, ok := issuedTags.Load(k.Stream[:end+1])
	if !ok {
		return
	}
	e := v.(*taggedKeys)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.servers, s.client) {
		e.servers = append(e.servers, s.client)
	}
}

// removeTagged deletes every key whose name starts with tag (a hash tag, so
// all of them are in one slot: on a cluster, one primary holds them) and
// returns how many it deleted.
func removeTagged(ctx context.Context, rdb redis.UniversalClient, tag string) (int64, error) {
	node := redis.UniversalClient(rdb)
	if c, ok := rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, tag)
		if err != nil {
			return 0, fmt.Errorf("find the primary of %s: %w", tag, err)
		}
		node = n
	}
	pattern := globEscape(tag) + "*"
	var removed int64
	cursor := uint64(0)
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return removed, fmt.Errorf("SCAN MATCH %s: %w", pattern, err)
		}
		// SCAN's pattern is a glob: the prefix check keeps the promise
		// whatever the server's matching does.
		keys = slices.DeleteFunc(keys, func(key string) bool { return !strings.HasPrefix(key, tag) })
		if len(keys) > 0 {
			n, err := node.Unlink(ctx, keys...).Result()
			if err != nil {
				return removed, fmt.Errorf("UNLINK %d keys of %s: %w", len(keys), tag, err)
			}
			removed += n
		}
		if next == 0 {
			return removed, nil
		}
		cursor = next
	}
}

// globEscape escapes the characters SCAN MATCH's glob gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
