package cli

import "github.com/spf13/cobra"

func (a *app) dlqCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, redrive and purge dead-letter records",
		Long: `dlq works on a dead-letter stream written by pelwarden: each record holds the
entry's original fields followed by metadata (pelwarden.original_id, .stream,
.group, .consumer, .deliveries, .reason, .error, .dead_lettered_at, .meta).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("dlq needs a subcommand: list, show, redrive or purge (see pelwarden dlq --help)")
		},
	}
	cmd.AddCommand(a.dlqListCommand(), a.dlqShowCommand(), a.dlqRedriveCommand(), a.dlqPurgeCommand())
	return cmd
}
