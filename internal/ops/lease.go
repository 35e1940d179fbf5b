package ops

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// LeaseFields are the fields of a partition's lease hash a tool reads, in
// the order DecodeLease takes them: owner, token and expires (server ms)
// written by the lease functions, and the blocked head lease_next records
// (its id, deliveries and the server ms from which it may be tried again,
// -1 when it waits for an operator; each "" when the partition is not
// blocked).
var LeaseFields = []string{"owner", "token", "expires", "blocked", "blocked_deliveries", "blocked_until"}

// LeaseState is a partition's lease as a tool shows it, read from its
// lease hash (pelwarden.LeaseKeyFor) against the server's clock.
type LeaseState struct {
	// Owner is the consumer holding the lease ("" when free). An expired
	// lease nobody took is still its owner's (the token did not move).
	Owner string
	// Token is the fencing token (0 before anyone held the lease).
	Token int64
	// Left is the time the lease has left; 0 or less when expired.
	Left time.Duration
	// Blocked is the id of the head blocking the partition ("" when none),
	// BlockedDeliveries its deliveries.
	Blocked           string
	BlockedDeliveries int64
	// RetryIn is the time until the blocked head may be tried again (0 or
	// less: it may be now, at the owner's next call). TooLarge: the head
	// is at max-deliveries but too large to dead-letter, and waits for an
	// operator; RetryIn is then 0.
	RetryIn  time.Duration
	TooLarge bool
}

// Expired reports whether the lease has an owner whose time is up.
func (l *LeaseState) Expired() bool { return l.Owner != "" && l.Left <= 0 }

// ReadLease reads a partition's lease in one pipelined round trip (TIME
// and HMGET of LeaseFields). It returns nil and no error when the key
// does not exist (the stream is not a partition in ordered mode). A key
// holding another type fails with an error matching
// pelwarden.ErrWrongType (pelwarden.Matches); a hash whose fields are not
// what the library writes fails naming the field.
func ReadLease(ctx context.Context, rdb redis.UniversalClient, key string) (*LeaseState, error) {
	pipe := rdb.Pipeline()
	tm := pipe.Time(ctx)
	h := pipe.HMGet(ctx, key, LeaseFields...)
	_, _ = pipe.Exec(ctx)
	now, err := tm.Result()
	if err != nil {
		return nil, commandError("TIME", "", err)
	}
	vals, err := h.Result()
	if err != nil {
		return nil, commandError("HMGET", key, err)
	}
	return DecodeLease(key, vals, now)
}

// DecodeLease decodes an HMGET of LeaseFields on key read at the server
// time now: nil when no field is set (no lease hash there).
func DecodeLease(key string, vals []any, now time.Time) (*LeaseState, error) {
	if len(vals) != len(LeaseFields) {
		return nil, fmt.Errorf("HMGET %s: %d values for %d fields", key, len(vals), len(LeaseFields))
	}
	str := make([]string, len(vals))
	set := false
	for i, v := range vals {
		switch v := v.(type) {
		case nil:
		case string:
			str[i], set = v, true
		default:
			return nil, fmt.Errorf("HMGET %s: field %s: unexpected reply %T", key, LeaseFields[i], v)
		}
	}
	if !set {
		return nil, nil
	}
	num := func(i int) (int64, error) {
		if str[i] == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(str[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("lease hash %s: field %s is %q, not an integer", key, LeaseFields[i], str[i])
		}
		return n, nil
	}
	l := &LeaseState{Owner: str[0], Blocked: str[3]}
	var err error
	if l.Token, err = num(1); err != nil {
		return nil, err
	}
	nowMS := now.UnixMilli()
	expires, err := num(2)
	if err != nil {
		return nil, err
	}
	l.Left = time.Duration(expires-nowMS) * time.Millisecond
	if l.Blocked == "" {
		return l, nil
	}
	if l.BlockedDeliveries, err = num(4); err != nil {
		return nil, err
	}
	until, err := num(5)
	if err != nil {
		return nil, err
	}
	if until < 0 {
		l.TooLarge = true
	} else {
		l.RetryIn = time.Duration(until-nowMS) * time.Millisecond
	}
	return l, nil
}
