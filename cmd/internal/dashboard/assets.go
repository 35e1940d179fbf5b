package dashboard

import (
	"embed"
	"net/http"
	"strings"
)

// The vendored htmx (https://htmx.org, Zero-Clause BSD; static/htmx.LICENSE):
// dist/htmx.min.js of the v2.0.10 tag of github.com/bigskysoftware/htmx.
// A test checks the file against HTMXSHA256, so a changed copy cannot ship
// unnoticed.
const (
	// HTMXVersion is the vendored htmx release.
	HTMXVersion = "2.0.10"
	// HTMXSHA256 is the SHA-256 of static/htmx.min.js.
	HTMXSHA256 = "71ea67185bfa8c98c39d31717c6fce5d852370fcdfd129db4543774d3145c0de"
)

// assetVersion is appended to asset URLs so a new release is not served
// from a browser's cache.
const assetVersion = HTMXVersion + "-1"

//go:embed static
var staticFS embed.FS

// staticHandler serves the embedded assets under /static/.
func staticHandler() http.Handler {
	fs := http.FileServerFS(staticFS)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no directory listings
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		fs.ServeHTTP(w, r)
	})
}
