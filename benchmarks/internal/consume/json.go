package consume

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/pelwarden/pelwarden/internal/measure"
)

// jsonReport is the part of a Report that WriteJSON writes: every result,
// without the Config (its Options and Logf do not encode).
type jsonReport struct {
	measure.RunInfo
	RTT                                  time.Duration
	Main, Reclaim, PEL, Ack, Slow, Large []Result
}

// WriteJSON writes rep's results as one JSON object (ReadJSON reads it
// back): what `go run ./benchmarks/cmd/consume --json FILE` writes for
// tools such as the headline report (benchmarks/cmd/bench-report).
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(jsonReport{RunInfo: rep.RunInfo, RTT: rep.RTT,
		Main: rep.Main, Reclaim: rep.Reclaim, PEL: rep.PEL, Ack: rep.Ack, Slow: rep.Slow, Large: rep.Large}); err != nil {
		return fmt.Errorf("consume: writing the report as JSON: %w", err)
	}
	return nil
}

// ReadJSON reads what WriteJSON wrote. The returned Report has a zero
// Config.
func ReadJSON(r io.Reader) (Report, error) {
	var j jsonReport
	if err := json.NewDecoder(r).Decode(&j); err != nil {
		return Report{}, fmt.Errorf("consume: reading a JSON report: %w", err)
	}
	return Report{RunInfo: j.RunInfo, RTT: j.RTT,
		Main: j.Main, Reclaim: j.Reclaim, PEL: j.PEL, Ack: j.Ack, Slow: j.Slow, Large: j.Large}, nil
}
