package cli

import (
	"context"
	"errors"
	"net/url"
	"os"
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
	for _, f := range []struct{ name, v string }{{"redis", a.redisURL}, {"cluster", a.clusterURL},
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
	raw, source := a.redisURL, "--redis"
	if raw == "" {
		if explicitOnly {
			if f := a.tlsFlagGiven(); f != "" {
				return nil, usageErrorf("%s needs --redis or --cluster with a rediss:// URL", f)
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
