package integration_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/pelwardentest"
)

// The redrive function and pelwarden.ParseDeadLetter agree on which
// records are pelwarden's, on the shared table testdata/deadletter_cases.json
// (the root module's TestParseDeadLetterCases runs ParseDeadLetter on it):
// `dlq show` and `dlq redrive` never disagree about one record.
func TestRedriveAgreesWithParseDeadLetter(t *testing.T) {
	raw, err := os.ReadFile("../testdata/deadletter_cases.json")
	require.NoError(t, err)
	var table struct {
		Cases []struct {
			Name   string      `json:"name"`
			Fields [][2]string `json:"fields"`
			Ours   bool        `json:"ours"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &table))
	require.NotEmpty(t, table.Cases)
	each(t, func(t *testing.T, s *target) {
		ctx := t.Context()
		k := pelwardentest.NewKeys(t)
		byID := map[string]int{}
		for i, c := range table.Cases {
			values := make([]string, 0, 2*len(c.Fields))
			fields := make([]pelwarden.Field, len(c.Fields))
			for j, f := range c.Fields {
				values = append(values, f[0], f[1])
				fields[j] = pelwarden.Field{Name: f[0], Value: f[1]}
			}
			_, ok := pelwarden.ParseDeadLetter(fields)
			require.Equal(t, c.Ours, ok, "ParseDeadLetter: %s", c.Name)
			id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.DeadLetterStream, Values: values}).Result()
			require.NoError(t, err)
			byID[id] = i
		}
		moved := map[string]bool{}
		foreign := map[string]bool{}
		cursor := ""
		for {
			page, err := s.lib.Redrive(ctx, pelwarden.RedriveArgs{DeadLetterStream: k.DeadLetterStream, Stream: k.Stream, AnySource: true, Cursor: cursor})
			require.NoError(t, err)
			for _, m := range page.Moved {
				moved[m.From] = true
			}
			for _, id := range page.Foreign {
				foreign[id] = true
			}
			if page.Done() {
				break
			}
			cursor = page.Cursor
		}
		for id, i := range byID {
			c := table.Cases[i]
			require.Equal(t, c.Ours, moved[id], "redrive moved %q", c.Name)
			require.Equal(t, !c.Ours, foreign[id], "redrive called %q foreign", c.Name)
		}
	})
}
