package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/pelwarden/pelwarden"
)

// paramError is a bad query or form value.
type paramError struct {
	Name, Message string
}

func (e *paramError) Error() string { return e.Name + " " + e.Message }

// name reads a required key or group name.
func name(v url.Values, key string) (string, error) {
	s := v.Get(key)
	if s == "" {
		return "", &paramError{key, "is required"}
	}
	if err := pelwarden.CheckName(s); err != nil {
		return "", &paramError{key, err.Error()}
	}
	return s, nil
}

// optName reads an optional name ("" when absent).
func optName(v url.Values, key string) (string, error) {
	if v.Get(key) == "" {
		return "", nil
	}
	return name(v, key)
}

// optID reads an optional stream id.
func optID(v url.Values, key string) (string, error) {
	s := v.Get(key)
	if s == "" {
		return "", nil
	}
	if _, err := pelwarden.ParseID(s); err != nil {
		return "", &paramError{key, "must be a stream id like 1700000000000-0"}
	}
	return s, nil
}

// duration reads a duration (def when absent).
func duration(v url.Values, key string, def time.Duration) (time.Duration, error) {
	s := v.Get(key)
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, &paramError{key, "must be a duration such as 30s, 5m or 24h"}
	}
	return d, nil
}

// integer reads an integer in [lo, hi] (def when absent).
func integer(v url.Values, key string, def, lo, hi int) (int, error) {
	s := v.Get(key)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, &paramError{key, fmt.Sprintf("must be a number from %d to %d", lo, hi)}
	}
	return n, nil
}

// number reads a positive float (def when absent).
func number(v url.Values, key string, def, hi float64) (float64, error) {
	s := v.Get(key)
	if s == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0) || f > hi {
		return 0, &paramError{key, fmt.Sprintf("must be a positive number up to %v", hi)}
	}
	return f, nil
}
