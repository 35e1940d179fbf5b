package measure

import (
	"fmt"
	"io"
)

// Verdict is "met" or "MISSED", for a target line.
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// Ratio is a/b, or 0 when b is 0.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// PerEntry is v/n, or 0 when n is not positive.
func PerEntry(v float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return v / float64(n)
}

// ReportWriter writes a report to W and keeps the first write error in Err;
// later writes do nothing.
type ReportWriter struct {
	W   io.Writer
	Err error
}

// Write implements io.Writer.
func (e *ReportWriter) Write(p []byte) (int, error) {
	if e.Err != nil {
		return 0, e.Err
	}
	n, err := e.W.Write(p)
	e.Err = err
	return n, err
}

// Printf formats to the report.
func (e *ReportWriter) Printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }
