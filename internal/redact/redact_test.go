package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redact"
)

func TestMessage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://user:secret@host:6379/0":            "redis://user:xxxxx@host:6379/0",
		"rediss://:secret@host:6380":                 "rediss://:xxxxx@host:6380",
		"redis://host:6379":                          "redis://host:6379",
		"redis://user@host":                          "redis://user@host",
		"redis://u:p%40ss@h:1 and redis://v:q@h:2/3": "redis://u:xxxxx@h:1 and redis://v:xxxxx@h:2/3",
		"redis://u:bad:pass@h:x":                     "redis://u:xxxxx@h:x",
	} {
		require.Equal(t, want, redact.Message(in), in)
	}
}

func TestURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "redis://u:xxxxx@host:1", redact.URL("redis://u:pa/ss #1@host:1"))
	require.Equal(t, "redis://host:1", redact.URL("redis://host:1"))
	before, pass, after, ok := redact.SplitPassword("redis://u:p@ss@h")
	require.True(t, ok)
	require.Equal(t, []string{"redis://u:", "p@ss", "@h"}, []string{before, pass, after})
}
