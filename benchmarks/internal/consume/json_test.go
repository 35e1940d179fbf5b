package consume

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/measure"
)

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	rep := Report{
		Config:  Config{Logf: func(string, ...any) {}}, // not encodable: left out
		RunInfo: measure.RunInfo{Server: "redis 8.0.2", IdleCPU: time.Millisecond},
		RTT:     30 * time.Microsecond,
		Main: []Result{{Method: "driver defaults", Part: PartMain, Sample: measure.Sample{Entries: 100, Wall: time.Second, RoundTrips: 4},
			Rates: []float64{100}, Verified: true}},
		Slow: []Result{{Method: "driver defaults x 2", Part: PartSlow, Consumers: []ConsumerResult{{Name: "a", Handled: 50, MaxHeld: 40}}, Ideal: time.Second}},
		Large: []Result{{Method: "large", Part: PartLarge,
			SlowLog: &SlowLogResult{Commands: 3, Slowest: []SlowCommand{{Name: "XREADGROUP", Duration: 17 * time.Millisecond}}}}},
	}
	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, rep))
	got, err := ReadJSON(&b)
	require.NoError(t, err)
	rep.Config = Config{}
	require.Equal(t, rep, got)

	_, err = ReadJSON(bytes.NewReader([]byte("{")))
	require.ErrorContains(t, err, "reading a JSON report")
}
