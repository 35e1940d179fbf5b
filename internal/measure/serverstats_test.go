package measure

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250001\r\nused_cpu_sys_children:9.0\r\n\r\n" +
		"# Commandstats\r\ncmdstat_xack:calls=10,usec=40,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall:calls=2,usec=100,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n"
	s, err := parseInfo(info)
	require.NoError(t, err)
	require.Equal(t, 3750001*time.Microsecond, s.CPU)
	require.Equal(t, CommandStat{Calls: 10, Usec: 40}, s.Cmds["xack"])
	require.Equal(t, CommandStat{Calls: 2, Usec: 100}, s.Cmds["fcall"])

	_, err = parseInfo("# CPU\r\nused_cpu_sys:1\r\n")
	require.Error(t, err)
}

// Commands run inside FCALL count in commandstats too; only the share the
// client sent is taken.
func TestCommandStatsUsecTakesTheClientsShare(t *testing.T) {
	before := Snapshot{Cmds: map[string]CommandStat{"xack": {Calls: 5, Usec: 10}}}
	after := Snapshot{Cmds: map[string]CommandStat{
		"xack":  {Calls: 15, Usec: 50}, // 10 Calls: 2 from the client, 8 from the function
		"fcall": {Calls: 2, Usec: 300},
		"info":  {Calls: 1, Usec: 99},
	}}
	got := CommandStatsUsec(before, after, map[string]int64{"xack": 2, "fcall": 2})
	require.InDelta(t, 300+40*2.0/10, got, 1e-9)
}
