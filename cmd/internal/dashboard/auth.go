package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
)

// requireAuth wraps h with HTTP basic authentication against a. The user
// and password are compared in constant time (through their SHA-256, so
// their lengths do not leak either).
func requireAuth(a *BasicAuth, h http.Handler) http.Handler {
	wantUser := sha256.Sum256([]byte(a.User))
	wantPass := sha256.Sum256([]byte(a.Password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		gotUser := sha256.Sum256([]byte(user))
		gotPass := sha256.Sum256([]byte(pass))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if !ok || userOK&passOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="pelwarden", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// userOf names who made a request, for the action log: the basic
// authentication user, else "anonymous".
func userOf(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return u
	}
	return "anonymous"
}
