package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardentest"
	"github.com/pelwarden/pelwarden/pelwardentest/testserver"
)

// TLS: on every image of the matrix, a server that speaks TLS only, with a
// CA and certificates made here. The ACL guide's roles run over rediss:// with
// verification on: the consumer before the library is loaded (a clear
// error), the deployer loading it with the command line, the consumer's
// driver end to end, the operator's status and dlq list. A certificate from
// another CA is refused by both, naming certificate verification.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "pelwarden-test")
	certFile, keyFile := ca.issue(t, "server", true)
	untrusted := newTestCA(t, "untrusted")
	for _, image := range testserver.Images() {
		t.Run(testserver.Label(image), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			srv := startTLS(t, image, &testserver.TLS{CertFile: certFile, KeyFile: keyFile, CAFile: ca.CAFile,
				Client: clientConfig(t, ca, "", "")})
			admin := srv.Client()
			t.Cleanup(func() { _ = admin.Close() })
			s := &target{srv: srv, rdb: admin}
			f := pelwardentest.Use(t, admin).NewFixture(t)
			orphans := f.Produce(3, nil)
			require.Len(t, f.LeavePending("crashed", 3), 3)
			ids := f.Produce(10, nil)
			poison := f.AddPoison("n", "bad")
			// pelwardentest loaded the library: a new server has none.
			require.NoError(t, admin.FunctionFlush(ctx).Err())

			_, cuser, cpass := aclUser(t, s, f.Keys, "consumer", nil)
			_, duser, dpass := aclUser(t, s, f.Keys, "deployer", nil)
			_, ouser, opass := aclUser(t, s, f.Keys, "operator", nil)
			consumerURL := tlsURL(t, srv, cuser, cpass)
			// MinIdle is 3 s, not the kit's 300 ms: with MaxDeliveries 2 an
			// orphan the consumer claimed (its second delivery) is
			// dead-lettered if it sits unacked and unextended for MinIdle:
			// a run of the whole suite on two cores dead-lettered the three
			// orphans that way, their acks not landed 300 ms after their
			// handlers succeeded.
			cfg := driver.Config{Consumer: "worker", MaxDeliveries: 2, MinIdle: 3 * time.Second,
				Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
					if pelwardentest.IsPoison(m.Fields) {
						return errors.New("poison")
					}
					return nil
				})}

			// The consumer may not load the library: Run says what to do.
			err := runUntilError(t, f.WithClient(tlsClient(t, consumerURL, ca.Pool())), cfg)
			require.ErrorIs(t, err, pelwarden.ErrLibraryMissing)
			require.ErrorIs(t, err, pelwarden.ErrNoPermission)
			require.Contains(t, err.Error(), "pelwarden load")

			// The deployer loads it over rediss://, verifying the server.
			r := pwRaw(t, "--redis", tlsURL(t, srv, duser, dpass), "--cacert", ca.CAFile, "load", "--json")
			require.Equal(t, exitOK, r.code, r.stderr)
			var load map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &load))
			node := obj(t, list(t, load["nodes"])[0])
			require.Equal(t, string(pelwarden.ActionLoaded), node["action"])
			require.Equal(t, pelwarden.LibraryVersion, node["after"])

			// The consumer's driver, end to end.
			run := f.WithClient(tlsClient(t, consumerURL, ca.Pool())).RunConsumer(cfg)
			f.Within(time.Minute).RequireDeadLettered(poison, pelwardentest.DeadLettered{Reason: pelwarden.ReasonMaxDeliveries})
			f.Within(time.Minute).RequirePELEmpty()
			f.RequireAcked(append(orphans, ids...)...)
			require.NoError(t, run.Stop())

			// The operator's commands.
			opURL := tlsURL(t, srv, ouser, opass)
			st := pwJSONRaw(t, "--redis", opURL, "--cacert", ca.CAFile, "status", f.Stream, f.Group)
			require.Zero(t, num(t, st["pending"]))
			require.EqualValues(t, 1, num(t, st["dead_letter_length"]))
			dl := pwJSONRaw(t, "--redis", opURL, "--cacert", ca.CAFile, "dlq", "list", f.DeadLetterStream)
			require.Equal(t, poison, obj(t, list(t, dl["records"])[0])["original_id"])

			// Another CA, or none (the system's CAs): refused, naming
			// certificate verification, before anything is sent.
			for _, args := range [][]string{
				{"--redis", opURL, "--cacert", untrusted.CAFile, "status", f.Stream, f.Group},
				{"--redis", opURL, "status", f.Stream, f.Group},
			} {
				r := pwRaw(t, args...)
				requireError(t, r, exitFailure, "certificate")
				require.Contains(t, r.stderr, "could not be verified; pass the CA that signed it with --cacert", "%v", args)
			}
			err = runUntilError(t, f.WithClient(tlsClient(t, consumerURL, untrusted.Pool())), cfg)
			var cv *tls.CertificateVerificationError
			require.ErrorAs(t, err, &cv, "%v", err)
			require.Contains(t, err.Error(), "failed to verify certificate")
			// Plain redis:// to a TLS-only server fails too (not silently).
			r = pwRaw(t, "--redis", strings.Replace(opURL, "rediss://", "redis://", 1), "status", f.Stream, f.Group)
			requireError(t, r, exitFailure, "cannot reach")
		})
	}
}

// A server that requires client certificates (tls-auth-clients yes): the
// command line with --cert and --key, the driver with a client
// certificate; without one the command line says what is missing.
func TestTLSClientCertificates(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "pelwarden-test")
	certFile, keyFile := ca.issue(t, "server", true)
	clientCert, clientKey := ca.issue(t, "client", false)
	image := testserver.Images()[0]
	ctx := t.Context()
	srv := startTLS(t, image, &testserver.TLS{CertFile: certFile, KeyFile: keyFile, CAFile: ca.CAFile, AuthClients: true,
		Client: clientConfig(t, ca, clientCert, clientKey)})
	admin := srv.Client()
	t.Cleanup(func() { _ = admin.Close() })
	_, err := pelwarden.Load(ctx, admin)
	require.NoError(t, err)
	f := pelwardentest.Use(t, admin).NewFixture(t)
	ids := f.Produce(5, nil)
	url := tlsURL(t, srv, "", "")

	r := pwRaw(t, "--redis", url, "--cacert", ca.CAFile, "--cert", clientCert, "--key", clientKey, "status", f.Stream, f.Group)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = pwRaw(t, "--redis", url, "--cacert", ca.CAFile, "status", f.Stream, f.Group)
	requireError(t, r, exitFailure, "pass --cert and --key")

	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	require.NoError(t, err)
	run := f.WithClient(tlsClient(t, url, ca.Pool(), pair)).RunConsumer(driver.Config{
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil })})
	f.Within(time.Minute).RequireAcked(ids...)
	require.NoError(t, run.Stop())
}

// startTLS starts a TLS-only server for the test and removes it at the end.
func startTLS(t *testing.T, image string, o *testserver.TLS) *testserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testserver.Start(ctx, image, testserver.Options{TLS: o})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return srv
}

// tlsURL is a rediss:// URL of srv, with user and password when user is
// not empty.
func tlsURL(t *testing.T, srv *testserver.Server, user, pass string) string {
	t.Helper()
	addr, err := srv.Addr(t.Context())
	require.NoError(t, err)
	u := &url.URL{Scheme: "rediss", Host: addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u.String()
}

// tlsClient is how an application connects: redis.ParseURL of a rediss://
// URL (verification on, the URL's host as server name), the CA pool, and
// client certificates where the server wants them.
func tlsClient(t *testing.T, url string, pool *x509.CertPool, certs ...tls.Certificate) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	require.NotNil(t, opts.TLSConfig, "rediss:// turns TLS on")
	require.False(t, opts.TLSConfig.InsecureSkipVerify)
	opts.TLSConfig.RootCAs = pool
	opts.TLSConfig.Certificates = certs
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// pwJSONRaw runs `pelwarden args... --json`, requires success and decodes
// stdout.
func pwJSONRaw(t *testing.T, args ...string) map[string]any {
	t.Helper()
	r := pwRaw(t, append(args, "--json")...)
	require.Equal(t, exitOK, r.code, "pelwarden %v: stderr: %s", args, r.stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout: %s", r.stdout)
	return v
}
