package cli

import (
	"context"
	"errors"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultURL is the server used without --redis, --cluster or $REDIS_URL.
const defaultURL = "redis://127.0.0.1:6379"

// connectTimeout bounds the first PING.
const connectTimeout = 5 * time.Second

// endpoint is where a command connects, resolved from the flags but not
// dialled yet.
type endpoint struct {
	// shown is the URL with the password redacted, for messages.
	shown string
	// source says where the URL came from ("--redis", "$REDIS_URL", ...).
	source  string
	opts    *redis.Options        // single server
	cluster *redis.ClusterOptions // Redis Cluster
}

// resolve parses --redis / --cluster / $REDIS_URL without connecting.
// explicitOnly ignores $REDIS_URL and the default, returning nil when no flag
// is given (the demo then starts a throwaway server).
func (a *app) resolve(explicitOnly bool) (*endpoint, error) {
	if a.redisURL != "" && a.clusterURL != "" {
		return nil, usageErrorf("--redis and --cluster exclude each other; give one")
	}
	if a.clusterURL != "" {
		raw := withScheme(a.clusterURL)
		a.addSecret(raw)
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, usageErrorf("--cluster %s: %s", redactURL(raw), scrub(parseError(err), raw))
		}
		a.secrets = append(a.secrets, o.Password)
		return &endpoint{shown: redactURL(raw), source: "--cluster", cluster: o}, nil
	}
	raw, source := a.redisURL, "--redis"
	if raw == "" {
		if explicitOnly {
			return nil, nil
		}
		raw, source = os.Getenv("REDIS_URL"), "$REDIS_URL"
		if raw == "" {
			raw, source = defaultURL, "default"
		}
	}
	raw = withScheme(raw)
	a.addSecret(raw)
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, usageErrorf("%s %s: %s", source, redactURL(raw), scrub(parseError(err), raw))
	}
	a.secrets = append(a.secrets, o.Password)
	return &endpoint{shown: redactURL(raw), source: source, opts: o}, nil
}

// client dials the endpoint and checks it answers PING.
func (e *endpoint) client(ctx context.Context) (redis.UniversalClient, error) {
	var rdb redis.UniversalClient
	if e.cluster != nil {
		rdb = redis.NewClusterClient(e.cluster)
	} else {
		rdb = redis.NewClient(e.opts)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		if ctx.Err() != nil {
			return nil, failuref("interrupted while connecting to %s", e.shown)
		}
		hint := "check the address, or set --redis URL or $REDIS_URL"
		if e.cluster != nil {
			hint = "check the seed address given with --cluster"
		}
		return nil, failuref("cannot reach %s (from %s): %v; %s", e.shown, e.source, err, hint)
	}
	return rdb, nil
}

// connect resolves the flags and dials. Commands validate their own
// arguments before calling it.
func (a *app) connect(ctx context.Context) (redis.UniversalClient, *endpoint, error) {
	e, err := a.resolve(false)
	if err != nil {
		return nil, nil, err
	}
	rdb, err := e.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	return rdb, e, nil
}

// addSecret remembers the password of a URL, parsable or not, so error
// messages never show it.
func (a *app) addSecret(raw string) {
	if m := userinfoRE.FindStringSubmatch(raw); m != nil && m[2] != "" {
		a.secrets = append(a.secrets, m[2])
	}
}

// withScheme accepts a bare host:port for convenience.
func withScheme(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "redis://" + s
}

// userinfoRE matches the user:password@ part of a URL.
var userinfoRE = regexp.MustCompile(`(\w+://[^:@/\s]*):([^/\s]*)@`)

// redactURL replaces the password of every URL in s with "xxxxx", also when
// a URL does not parse.
func redactURL(s string) string {
	return userinfoRE.ReplaceAllString(s, "${1}:xxxxx@")
}

// parseError is the message of a URL parsing error, without the URL that
// net/url repeats (the caller names it, redacted).
func parseError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// scrub replaces raw (a URL with a password) in msg by its redacted form.
func scrub(msg, raw string) string {
	return redactURL(strings.ReplaceAll(msg, raw, redactURL(raw)))
}
