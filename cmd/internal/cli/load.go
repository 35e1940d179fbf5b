package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
)

// loadJSON is the --json output of load.
type loadJSON struct {
	// Embedded is the version this command carries.
	Embedded string `json:"embedded_version"`
	// Mode is "function" (FCALL) or "evalsha" (FUNCTION refused).
	Mode  string         `json:"mode"`
	Nodes []nodeLoadJSON `json:"nodes"`
}

type nodeLoadJSON struct {
	Addr   string `json:"addr"`
	Before string `json:"before"` // "" when absent
	After  string `json:"after"`
	// Action: loaded, upgraded, current, kept-newer or evalsha.
	Action string `json:"action"`
}

func (a *app) loadCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "load",
		Short: "Load or upgrade the pelwarden function library; prints the version before and after",
		Long: `load loads the embedded pelwarden library (version ` + pelwarden.LibraryVersion + `) on the server, or on
every primary of a Redis Cluster: absent, it is loaded; older, it is replaced;
the same or newer, it is left alone (never a downgrade). It prints the version
found before and after on each server. Where FUNCTION is refused, the library
runs through EVALSHA instead and the mode says so.`,
		Example: `  pelwarden load --redis redis://:secret@10.0.0.5:6379
  pelwarden load --cluster redis://10.0.0.5:7000 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			rdb, e, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			res, err := pelwarden.NewLibrary(rdb).Load(ctx)
			if err != nil {
				return err
			}
			out := loadJSON{Embedded: pelwarden.LibraryVersion, Mode: res.Mode.String(), Nodes: []nodeLoadJSON{}}
			for _, n := range res.Nodes {
				addr := n.Addr
				if e.failover != nil {
					// A failover client has no fixed address: name the
					// primary the sentinels know.
					addr = "primary " + e.failover.MasterName + " (via sentinels)"
				}
				out.Nodes = append(out.Nodes, nodeLoadJSON{Addr: addr, Before: n.Before, After: n.After, Action: string(n.Action)})
			}
			if a.json {
				return a.printJSON(out)
			}
			tw := a.table()
			fmt.Fprintln(tw, "SERVER\tBEFORE\tAFTER\tACTION")
			for _, n := range out.Nodes {
				before, after := n.Before, n.After
				if before == "" {
					before = "(none)"
				}
				if after == "" {
					after = "(none)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Addr, before, after, n.Action)
			}
			_ = tw.Flush()
			a.printf("mode: %s (embedded library %s)\n", out.Mode, out.Embedded)
			return nil
		}),
	}
}
