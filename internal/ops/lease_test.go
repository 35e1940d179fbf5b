package ops

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestDecodeLease(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	ms := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }
	for _, tc := range []struct {
		name string
		vals []any
		want *LeaseState
	}{
		{"no hash", []any{nil, nil, nil, nil, nil, nil}, nil},
		{"held", []any{"c1", "3", ms(5 * time.Second), nil, nil, nil},
			&LeaseState{Owner: "c1", Token: 3, Left: 5 * time.Second}},
		{"free", []any{"", "4", "0", "", "", ""},
			&LeaseState{Token: 4, Left: -time.Duration(now.UnixMilli()) * time.Millisecond}},
		{"blocked by a backoff", []any{"c1", "3", ms(time.Second), "5-1", "2", ms(3 * time.Second)},
			&LeaseState{Owner: "c1", Token: 3, Left: time.Second, Blocked: "5-1", BlockedDeliveries: 2, RetryIn: 3 * time.Second}},
		{"blocked, too large", []any{"c1", "3", ms(-time.Second), "5-1", "7", "-1"},
			&LeaseState{Owner: "c1", Token: 3, Left: -time.Second, Blocked: "5-1", BlockedDeliveries: 7, TooLarge: true}},
	} {
		got, err := DecodeLease("{s}:lease", tc.vals, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Fatalf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	held, _ := DecodeLease("k", []any{"c1", "1", ms(-time.Millisecond), nil, nil, nil}, now)
	if !held.Expired() {
		t.Fatal("a lease past its expiry with an owner is expired")
	}
	if free, _ := DecodeLease("k", []any{"", "1", "0", nil, nil, nil}, now); free.Expired() {
		t.Fatal("a free lease is not expired")
	}
	for name, vals := range map[string][]any{
		"token":              {"c1", "x", "0", nil, nil, nil},
		"expires":            {"c1", "1", "1.5", nil, nil, nil},
		"blocked_deliveries": {"c1", "1", "0", "5-1", "two", "0"},
		"blocked_until":      {"c1", "1", "0", "5-1", "2", "soon"},
		"fields":             {"c1"},
		"reply":              {"c1", int64(1), "0", nil, nil, nil},
	} {
		_, err := DecodeLease("k", vals, now)
		if err == nil {
			t.Fatalf("%s: a malformed hash decoded", name)
		}
		if len(vals) == len(LeaseFields) && name != "reply" && !strings.Contains(err.Error(), "field "+name) {
			t.Fatalf("%s: the error does not name the field: %v", name, err)
		}
	}
}
