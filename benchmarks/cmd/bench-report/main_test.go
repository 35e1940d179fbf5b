package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/benchmarks/internal/headline"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rounds", "0"}, 2, "--rounds must be between 1 and 20"},
		{[]string{"--jobs", "nope"}, 2, `--jobs: no job "nope"`},
		{[]string{"--rerender", "--jobs", "trim"}, 2, "--rerender rewrites the whole table"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, c.code, run(context.Background(), c.args, &out, &errb), "%v", c.args)
		require.Contains(t, errb.String(), c.want, "%v", c.args)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--list"}, &out, &errb), errb.String())
	for _, j := range headline.Jobs() {
		require.Contains(t, out.String(), j.Name+" ")
	}
	require.Equal(t, len(headline.Jobs())+len(headline.Figures()), strings.Count(out.String(), "\n"))
}

func TestPick(t *testing.T) {
	t.Parallel()
	all := headline.Jobs()
	got, partial, err := pick(all, "")
	require.NoError(t, err)
	require.False(t, partial)
	require.Len(t, got, len(all))
	got, partial, err = pick(all, "trim, pause")
	require.NoError(t, err)
	require.True(t, partial)
	require.Equal(t, []string{"trim", "pause"}, []string{got[0].Name, got[1].Name})
}
