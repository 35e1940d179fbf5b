package reclaimbench

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
	require.Equal(t, 3750001*time.Microsecond, s.cpu)
	require.Equal(t, cmdStat{calls: 10, usec: 40}, s.cmds["xack"])
	require.Equal(t, cmdStat{calls: 2, usec: 100}, s.cmds["fcall"])

	_, err = parseInfo("# CPU\r\nused_cpu_sys:1\r\n")
	require.Error(t, err)
}

// Commands run inside FCALL count in commandstats too; only the share the
// client sent is taken.
func TestCommandStatsUsecTakesTheClientsShare(t *testing.T) {
	before := serverSnapshot{cmds: map[string]cmdStat{"xack": {calls: 5, usec: 10}}}
	after := serverSnapshot{cmds: map[string]cmdStat{
		"xack":  {calls: 15, usec: 50}, // 10 calls: 2 from the client, 8 from the function
		"fcall": {calls: 2, usec: 300},
		"info":  {calls: 1, usec: 99},
	}}
	got := commandStatsUsec(before, after, map[string]int64{"xack": 2, "fcall": 2})
	require.InDelta(t, 300+40*2.0/10, got, 1e-9)
}
