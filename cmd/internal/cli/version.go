package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
)

// versionJSON is the --json output of version.
type versionJSON struct {
	// Version is the binary's module version: the release it was installed
	// at (go install ...@v0.1.0), "(devel)" when built from a checkout.
	Version string `json:"version"`
	// Module is the command's module path.
	Module string `json:"module"`
	// Core is the version of the core module linked in
	// (github.com/pelwarden/pelwarden).
	Core string `json:"core"`
	// Library is the version of the function library this binary loads.
	Library string `json:"library"`
	// Go is the Go release the binary was built with.
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Server is the library found on the server, with connection flags only.
	Server *serverLibraryJSON `json:"server,omitempty"`
}

type serverLibraryJSON struct {
	// Library is the version loaded on the server ("" when none is; "mixed"
	// when the primaries of a cluster disagree).
	Library string `json:"library"`
	// Nodes is each server's version (each primary's on a cluster).
	Nodes []nodeLibraryJSON `json:"nodes"`
}

type nodeLibraryJSON struct {
	Addr    string `json:"addr"`
	Library string `json:"library"` // "" when none is loaded
}

// buildVersion reads the binary's versions from its build information.
func buildVersion() versionJSON {
	v := versionJSON{Version: "(devel)", Module: "github.com/pelwarden/pelwarden/cmd", Core: "(devel)",
		Library: pelwarden.LibraryVersion, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Path != "" {
		v.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/pelwarden/pelwarden" {
			v.Core = d.Version
			if d.Replace != nil {
				v.Core = d.Replace.Version
				if v.Core == "" {
					v.Core = "(devel)"
				}
			}
		}
	}
	return v
}

// versionLine is --version's output.
func versionLine() string {
	v := buildVersion()
	return fmt.Sprintf("pelwarden %s (library %s, %s %s)\n", v.Version, v.Library, v.Go, v.Platform)
}

// connectionGiven reports whether a connection flag was given.
func (a *app) connectionGiven() bool {
	if a.globalFlags == nil {
		return false
	}
	for _, f := range []string{"redis", "cluster", "sentinel"} {
		if a.globalFlags.Changed(f) {
			return true
		}
	}
	return false
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the binary's version, the library version it loads and, with a connection flag, the server's",
		Long: `version prints the module version this binary was built from (the release it
was installed at with go install ...@VERSION; "(devel)" when built from a
checkout), the version of the core module linked in, the version of the
function library it loads, and the Go release it was built with. With
--redis, --cluster or --sentinel it also prints the library version loaded
on the server (on every primary of a cluster), or that none is loaded; it
never loads it.`,
		Example: `  pelwarden version
  pelwarden version --redis redis://10.0.0.5:6379 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			if a.connectionGiven() {
				ctx := cmd.Context()
				rdb, e, err := a.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				s, err := serverLibrary(ctx, rdb)
				if err != nil {
					return err
				}
				if e.failover != nil && len(s.Nodes) == 1 {
					s.Nodes[0].Addr = "primary " + e.failover.MasterName + " (via sentinels)"
				}
				v.Server = s
			}
			if a.json {
				return a.printJSON(v)
			}
			a.printf("pelwarden %s (module %s)\n", v.Version, v.Module)
			a.printf("core module github.com/pelwarden/pelwarden %s\n", v.Core)
			a.printf("function library %s (embedded: what load installs)\n", v.Library)
			a.printf("built with %s %s\n", v.Go, v.Platform)
			if v.Server != nil {
				for _, n := range v.Server.Nodes {
					if n.Library == "" {
						a.printf("server %s: no pelwarden library loaded (pelwarden load installs %s)\n", n.Addr, v.Library)
					} else {
						a.printf("server %s: library %s loaded\n", n.Addr, n.Library)
					}
				}
			}
			return nil
		}),
	}
}

// serverLibrary reads the library version on rdb: on each primary of a
// cluster, else on the one server.
func serverLibrary(ctx context.Context, rdb redis.UniversalClient) (*serverLibraryJSON, error) {
	out := &serverLibraryJSON{Nodes: []nodeLibraryJSON{}}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		ver, err := pelwarden.LoadedVersion(ctx, c)
		if err != nil {
			return fmt.Errorf("reading the library version on %s: %w", c.Options().Addr, err)
		}
		mu.Lock()
		out.Nodes = append(out.Nodes, nodeLibraryJSON{Addr: c.Options().Addr, Library: ver})
		mu.Unlock()
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, read); err != nil {
			return nil, err
		}
	case *redis.Client:
		if err := read(ctx, c); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unexpected client %T", rdb)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Addr < out.Nodes[j].Addr })
	for i, n := range out.Nodes {
		switch {
		case i == 0:
			out.Library = n.Library
		case n.Library != out.Library:
			out.Library = "mixed"
		}
	}
	return out, nil
}
