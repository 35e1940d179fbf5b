package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/redact"
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
	source   string
	opts     *redis.Options         // single server
	cluster  *redis.ClusterOptions  // Redis Cluster
	failover *redis.FailoverOptions // primary found through Redis Sentinel
}

// resolve parses --redis / --cluster / $REDIS_URL without connecting.
// explicitOnly ignores $REDIS_URL and the default, returning nil when no flag
// is given (the demo then starts a throwaway server).
func (a *app) resolve(explicitOnly bool) (*endpoint, error) {
	var given []string
	for _, f := range []struct{ name, v string }{{"--redis", a.redisURL}, {"--cluster", a.clusterURL}, {"--sentinel", a.sentinelURL}} {
		if f.v != "" {
			given = append(given, f.name)
		}
	}
	if len(given) > 1 {
		return nil, usageErrorf("%s exclude each other; give one", strings.Join(given, " and "))
	}
	for _, f := range []struct{ name, v string }{{"redis", a.redisURL}, {"cluster", a.clusterURL}, {"sentinel", a.sentinelURL},
		{"cacert", a.caCert}, {"cert", a.cert}, {"key", a.key}} {
		if f.v == "" && a.globalFlags != nil && a.globalFlags.Changed(f.name) {
			return nil, usageErrorf("--%s must not be empty", f.name)
		}
	}
	if a.clusterURL != "" {
		raw := withScheme(a.clusterURL)
		a.addSecret(raw)
		o, err := redis.ParseClusterURL(raw)
		if err != nil {
			return nil, usageErrorf("--cluster %s: %s", redact.URL(raw), scrub(parseError(err), raw))
		}
		a.secrets = append(a.secrets, o.Password)
		if err := a.applyTLS(redact.URL(raw), o.TLSConfig); err != nil {
			return nil, err
		}
		return &endpoint{shown: redact.URL(raw), source: "--cluster", cluster: o}, nil
	}
	if a.sentinelURL != "" {
		raw := a.sentinelURL
		a.addSecret(raw)
		o, err := parseSentinelURL(raw)
		if err != nil {
			return nil, usageErrorf("--sentinel %s: %s", redact.URL(raw), scrub(err.Error(), raw))
		}
		a.secrets = append(a.secrets, o.Password)
		if err := a.applyTLS(redact.URL(raw), o.TLSConfig); err != nil {
			return nil, err
		}
		return &endpoint{shown: redact.URL(raw), source: "--sentinel", failover: o}, nil
	}
	raw, source := a.redisURL, "--redis"
	if raw == "" {
		if explicitOnly {
			if f := a.tlsFlagGiven(); f != "" {
				return nil, usageErrorf("%s needs --redis or --cluster with a rediss:// URL (or --sentinel with rediss-sentinel://)", f)
			}
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
		return nil, usageErrorf("%s %s: %s", source, redact.URL(raw), scrub(parseError(err), raw))
	}
	a.secrets = append(a.secrets, o.Password)
	if err := a.applyTLS(redact.URL(raw), o.TLSConfig); err != nil {
		return nil, err
	}
	return &endpoint{shown: redact.URL(raw), source: source, opts: o}, nil
}

// client dials the endpoint and checks it answers PING.
func (e *endpoint) client(ctx context.Context) (redis.UniversalClient, error) {
	var rdb redis.UniversalClient
	switch {
	case e.cluster != nil:
		rdb = redis.NewClusterClient(e.cluster)
	case e.failover != nil:
		rdb = redis.NewFailoverClient(e.failover)
	default:
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
		switch {
		case e.cluster != nil:
			hint = "check the seed address given with --cluster"
		case e.failover != nil:
			hint = "check the sentinel addresses and the master name given with --sentinel"
		}
		if h := tlsHint(err); h != "" {
			hint = h
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

// connectToStream connects like connect and checks that key is a stream
// (what names it in the error: "dead-letter stream"). The caller closes
// the client.
func (a *app) connectToStream(ctx context.Context, what, key string) (redis.UniversalClient, error) {
	rdb, _, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := needStream(ctx, rdb, what, key); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return rdb, nil
}

// Sentinel URL schemes: plain and TLS.
const (
	sentinelScheme    = "redis-sentinel"
	sentinelTLSScheme = "rediss-sentinel"
)

// parseSentinelURL parses --sentinel:
// redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[?db=N]
// (rediss-sentinel:// for TLS to the sentinels and the servers). The
// addresses are the sentinels'; MASTER is the name they monitor the
// primary under; user and password authenticate to the primary (and its
// replicas), not to the sentinels.
func parseSentinelURL(raw string) (*redis.FailoverOptions, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || (scheme != sentinelScheme && scheme != sentinelTLSScheme) {
		return nil, errors.New("want " + sentinelScheme + "://[user:password@]host:port[,host:port...]/MASTER[?db=N] (" + sentinelTLSScheme + ":// for TLS)")
	}
	o := &redis.FailoverOptions{}
	// The user information first, up to the last '@', so that a password
	// written without escaping ('/', '?', '#') is taken whole.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err error
		if o.Username, err = url.PathUnescape(user); err != nil {
			return nil, errors.New("the user name is not URL-escaped correctly")
		}
		if o.Password, err = url.PathUnescape(pass); err != nil {
			return nil, errors.New("the password is not URL-escaped correctly")
		}
		rest = rest[at+1:]
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, master, _ := strings.Cut(rest, "/")
	master, err := url.PathUnescape(master)
	if err != nil || master == "" || strings.Contains(master, "/") {
		return nil, errors.New("give the master name after the sentinel addresses: .../MASTER")
	}
	o.MasterName = master
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return nil, fmt.Errorf("sentinel address %q: want host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("sentinel address %q: bad port", h)
		}
		o.SentinelAddrs = append(o.SentinelAddrs, h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("query: %v", err)
	}
	for k, v := range q {
		if k != "db" || len(v) != 1 {
			return nil, fmt.Errorf("unknown or repeated parameter %q (only db=N)", k)
		}
		if o.DB, err = strconv.Atoi(v[0]); err != nil || o.DB < 0 {
			return nil, fmt.Errorf("db=%q: want a database number", v[0])
		}
	}
	if scheme == sentinelTLSScheme {
		// No ServerName: crypto/tls takes it from each address dialled
		// (the sentinels' and the primary's).
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// addSecret remembers the password of a URL given by the user, parsable or
// not, so that no message shows it.
func (a *app) addSecret(raw string) {
	if _, pass, _, ok := redact.SplitPassword(raw); ok && pass != "" {
		a.secrets = append(a.secrets, pass)
	}
}

// withScheme accepts a bare host:port for convenience.
func withScheme(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "redis://" + s
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

// scrub removes from msg, a URL parser's message about raw, everything that
// could be part of raw's password: raw itself, the password, and any word
// of the message that is a piece of the password. A password with
// unescaped '/', '?', '#' or ':' splits the URL in odd places, and the
// parser then quotes a piece of it ("invalid port \":pa\" after host").
func scrub(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, redact.URL(raw))
	_, pass, _, ok := redact.SplitPassword(raw)
	if !ok || pass == "" {
		return redact.Message(msg)
	}
	msg = redact.Message(strings.ReplaceAll(msg, pass, redact.Placeholder))
	pieces := map[string]bool{}
	for _, p := range strings.FieldsFunc(pass, isURLDelimiter) {
		pieces[p] = true
	}
	var b strings.Builder
	for len(msg) > 0 {
		i := strings.IndexFunc(msg, isURLDelimiter)
		if i < 0 {
			i = len(msg)
		}
		if word := msg[:i]; pieces[word] {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(word)
		}
		if i < len(msg) {
			b.WriteByte(msg[i])
			i++
		}
		msg = msg[i:]
	}
	return b.String()
}

// isURLDelimiter reports the characters a URL parser splits at, and the
// quotes and spaces of its messages.
func isURLDelimiter(r rune) bool {
	return strings.ContainsRune("/?#@:%=&;,\"' ", r)
}
