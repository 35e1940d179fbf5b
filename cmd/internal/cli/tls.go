package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
)

// TLS files: --cacert, --cert and --key, like redis-cli's, each defaulting
// to an environment variable. The URL's scheme turns TLS on (rediss://);
// certificate verification is always on.
const (
	envCACert = "REDIS_CACERT"
	envCert   = "REDIS_CERT"
	envKey    = "REDIS_KEY"
)

// tlsFile is one TLS file setting and where it came from.
type tlsFile struct {
	path   string
	source string // "--cacert" or "$REDIS_CACERT"
	flag   bool   // given as a flag (not from the environment)
}

// tlsFiles resolves the three settings: a flag wins over its variable.
func (a *app) tlsFiles() (ca, cert, key tlsFile) {
	pick := func(flagValue, flagName, env string) tlsFile {
		if flagValue != "" {
			return tlsFile{path: flagValue, source: flagName, flag: true}
		}
		if v := os.Getenv(env); v != "" {
			return tlsFile{path: v, source: "$" + env}
		}
		return tlsFile{}
	}
	return pick(a.caCert, "--cacert", envCACert), pick(a.cert, "--cert", envCert), pick(a.key, "--key", envKey)
}

// tlsFlagGiven returns the first TLS flag given, "" when none is.
func (a *app) tlsFlagGiven() string {
	for _, f := range []struct{ name, v string }{{"--cacert", a.caCert}, {"--cert", a.cert}, {"--key", a.key}} {
		if f.v != "" {
			return f.name
		}
	}
	return ""
}

// applyTLS sets the CA and client certificate of a rediss:// connection.
// cfg is the TLS config go-redis made from the URL, nil for redis://. Flags
// with a plain redis:// URL are a usage error; variables are then ignored
// (they may be set for other servers).
func (a *app) applyTLS(shown string, cfg *tls.Config) error {
	ca, cert, key := a.tlsFiles()
	if cfg == nil {
		for _, f := range []tlsFile{ca, cert, key} {
			if f.flag {
				return usageErrorf("%s needs a rediss:// URL (TLS); %s is not one", f.source, shown)
			}
		}
		return nil
	}
	if ca.path != "" {
		pem, err := os.ReadFile(ca.path)
		if err != nil {
			return usageErrorf("%s: %v", ca.source, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usageErrorf("%s %s: no PEM certificate in the file", ca.source, ca.path)
		}
		cfg.RootCAs = pool // only this CA, like redis-cli --cacert
	}
	switch {
	case cert.path == "" && key.path == "":
	case cert.path == "":
		return usageErrorf("%s %s needs a client certificate too (--cert or $%s)", key.source, key.path, envCert)
	case key.path == "":
		return usageErrorf("%s %s needs its private key too (--key or $%s)", cert.source, cert.path, envKey)
	default:
		pair, err := tls.LoadX509KeyPair(cert.path, key.path)
		if err != nil {
			return usageErrorf("%s %s, %s %s: %v", cert.source, cert.path, key.source, key.path, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return nil
}

// tlsHint explains a TLS failure while connecting, "" for other errors.
func tlsHint(err error) string {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return "the server's TLS certificate could not be verified; pass the CA that signed it with --cacert FILE (or $" + envCACert + ")"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		// A TLS alert from the server, e.g. "tls: certificate required".
		return "the server refused the TLS handshake; if it requires client certificates, pass --cert and --key (or $" + envCert + " and $" + envKey + ")"
	}
	return ""
}
