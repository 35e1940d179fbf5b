package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bad flags are refused with exit 2 before any server is started or
// contacted (--redis names a port nothing listens on).
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--entries", "0"}, "--entries must be between 1 and 10000000, got 0"},
		{[]string{"--reclaim-entries", "10000001"}, "--reclaim-entries must be between 1 and 10000000"},
		{[]string{"--rounds", "0"}, "--rounds must be between 1 and 100"},
		{[]string{"--parts", "main,magic"}, `--parts: unknown part "magic" (want main, reclaim, pel, ack, slow, large)`},
		{[]string{"--parts", " "}, "--parts must not be empty"},
		{[]string{"--drivers", "c=0"}, `--drivers: driver variant "c=0": c wants a positive integer`},
		{[]string{"--redis", "redis://127.0.0.1:1/x"}, "--redis: "},
		{[]string{"--suite", "consume"}, "flag provided but not defined: -suite"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"--redis", "127.0.0.1:1"}, tc.args...), &out, &errb)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.says, tc.args)
		require.Empty(t, out.String(), tc.args)
	}
}

// -help prints the flags and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"-help"}, &out, &errb))
	for _, want := range []string{"go run ./benchmarks/cmd/consume", "-parts", "-rounds", "-watermill", "-reclaim-entries", "-profile-dir", "PELWARDEN_BENCH_IMAGE"} {
		require.Contains(t, errb.String(), want)
	}
}
