package cli

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pelwarden/pelwarden"
)

// pauseJSON is the --json output of pause and resume: one line per stream.
type pauseJSON struct {
	Stream string `json:"stream"`
	Group  string `json:"group"`
	Paused bool   `json:"paused"`
	// Changed: resume found the group paused (pause always records).
	Changed bool   `json:"changed"`
	By      string `json:"by,omitempty"`
	Reason  string `json:"reason,omitempty"`
	AtMs    int64  `json:"at_ms,omitempty"`
}

// pauseTargets are the streams a pause or resume names: STREAM, or with
// --partitions N the N partitions of the partitioned stream STREAM.
func pauseTargets(stream string, partitions int) ([]string, error) {
	if partitions == 0 {
		return []string{stream}, nil
	}
	keys, err := pelwarden.Partitions(stream, partitions)
	if err != nil {
		return nil, usageErrorf("--partitions: %v", err)
	}
	return keys, nil
}

// defaultPauser names who pauses: user@host.
func defaultPauser() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}

func (a *app) pauseCommand() *cobra.Command {
	var reason, by string
	var partitions int
	cmd := &cobra.Command{
		Use:   "pause STREAM GROUP [--reason TEXT] [--partitions N]",
		Short: "Pause a consumer group: its consumers take no new entries until resumed",
		Long: `pause records in the server that the group is paused (pelwarden.PauseGroup),
with who paused it, when and why. Every running driver consumer of the group
checks every second: within about a second it stops reading and claiming,
starts no new handler (entries it holds wait, their leases kept), and lets
the handlers already running finish and their acks land. A consumer started
while the group is paused waits. Nothing is lost, and nothing is
redelivered: pelwarden resume picks up where it stopped.

With --partitions N, STREAM is a partitioned stream's name
(pelwarden.Partitions(STREAM, N)) and every partition is paused.`,
		Example: `  pelwarden pause '{orders}' billing --reason 'payment gateway down (INC-4211)'
  pelwarden pause payments billing --partitions 16`,
		Args: exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			if len(reason) > pelwarden.MaxPauseText || len(by) > pelwarden.MaxPauseText {
				return usageErrorf("--reason and --by take at most %d bytes", pelwarden.MaxPauseText)
			}
			streams, err := pauseTargets(stream, partitions)
			if err != nil {
				return err
			}
			if by == "" {
				by = defaultPauser()
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			var out []pauseJSON
			for _, s := range streams {
				if err := pelwarden.PauseGroup(ctx, rdb, s, group, pelwarden.Pause{By: by, Reason: reason}); err != nil {
					return classify(err)
				}
				p, err := pelwarden.ReadPause(ctx, rdb, s, group)
				if err != nil {
					return classify(err)
				}
				if p == nil {
					return failuref("the pause of %s on %s was removed as it was written (a resume ran at the same time?)", group, s)
				}
				out = append(out, pauseJSON{Stream: s, Group: group, Paused: true, Changed: true, By: p.By, Reason: p.Reason, AtMs: p.At.UnixMilli()})
			}
			if a.json {
				return a.printJSON(out)
			}
			for _, o := range out {
				a.printf("paused group %s on %s (by %s at %s)\n", o.Group, o.Stream, o.By, time.UnixMilli(o.AtMs).UTC().Format(time.RFC3339))
			}
			a.printf("its consumers stop taking entries within about a second; pelwarden resume %s %s%s ends the pause\n", quoteArg(stream), quoteArg(group), partitionsFlag(partitions))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown by status, the exporter and the consumers' log")
	cmd.Flags().StringVar(&by, "by", "", "who pauses (default USER@HOST)")
	cmd.Flags().IntVar(&partitions, "partitions", 0, "STREAM is a partitioned stream of `N` partitions: pause every one")
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	var partitions int
	cmd := &cobra.Command{
		Use:   "resume STREAM GROUP [--partitions N]",
		Short: "End a pause: the group's consumers take entries again",
		Long: `resume removes the group's pause (pelwarden.ResumeGroup). Every running
consumer of the group takes entries again within about a second, starting
with the entries it held. With --partitions N, STREAM is a partitioned
stream's name and every partition is resumed.`,
		Example: `  pelwarden resume '{orders}' billing
  pelwarden resume payments billing --partitions 16`,
		Args: exactArgs("STREAM", "GROUP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			stream, group := args[0], args[1]
			streams, err := pauseTargets(stream, partitions)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rdb, _, err := a.connect(ctx)
			if err != nil {
				return err
			}
			defer rdb.Close()
			var out []pauseJSON
			for _, s := range streams {
				was, err := pelwarden.ResumeGroup(ctx, rdb, s, group)
				if err != nil {
					return classify(err)
				}
				out = append(out, pauseJSON{Stream: s, Group: group, Changed: was})
			}
			if a.json {
				return a.printJSON(out)
			}
			for _, o := range out {
				if o.Changed {
					a.printf("resumed group %s on %s\n", o.Group, o.Stream)
				} else {
					a.printf("group %s on %s was not paused\n", o.Group, o.Stream)
				}
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&partitions, "partitions", 0, "STREAM is a partitioned stream of `N` partitions: resume every one")
	return cmd
}

// partitionsFlag is " --partitions N" when n is set.
func partitionsFlag(n int) string {
	if n == 0 {
		return ""
	}
	return " --partitions " + strconv.Itoa(n)
}

// quoteArg quotes s for a POSIX shell when it needs it ('{orders}').
func quoteArg(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
