package pelwarden

import "fmt"

// DefaultMaxDeliveries is the delivery limit a MaxDeliveries of 0 stands
// for: an entry delivered five times without being acknowledged is
// dead-lettered.
const DefaultMaxDeliveries = 5

// NoDeliveryLimit as a MaxDeliveries turns dead-lettering by delivery count
// off: entries are handed out however often they were delivered.
const NoDeliveryLimit = -1

// DeliveryLimit is the one reading of a MaxDeliveries setting, wherever
// pelwarden takes one: the library's argument structs (ClaimArgs,
// LeaseNextArgs), the driver's Config, the test kit's ReclaimArgs and the
// CLI's --max-deliveries. It returns the delivery count at which an entry
// is dead-lettered, and false when there is no limit:
//
//   - 0 means DefaultMaxDeliveries, so a zero value dead-letters poison
//     entries;
//   - NoDeliveryLimit means no limit;
//   - a positive n means n.
//
// Any other value is invalid: DeliveryLimit then returns an error
// matching ErrInvalidArgument, naming field.
func DeliveryLimit(field string, maxDeliveries int) (limit int, limited bool, err error) {
	limit, limited, problem := deliveryLimit(maxDeliveries)
	if problem != "" {
		return 0, false, &ArgumentError{Scope: "pelwarden", Field: field, Reason: problem}
	}
	return limit, limited, nil
}

// deliveryLimit is DeliveryLimit, with what is wrong with an invalid
// value as text (the library's functions report it in their own errors).
func deliveryLimit(maxDeliveries int) (limit int, limited bool, problem string) {
	switch {
	case maxDeliveries == 0:
		return DefaultMaxDeliveries, true, ""
	case maxDeliveries == NoDeliveryLimit:
		return 0, false, ""
	case maxDeliveries > 0:
		return maxDeliveries, true, ""
	}
	return 0, false, fmt.Sprintf("must be 0 (DefaultMaxDeliveries), NoDeliveryLimit (-1) or positive, got %d", maxDeliveries)
}

// wireDeliveries is a MaxDeliveries as the function library takes it: the
// limit, 0 for none.
func wireDeliveries(fn string, maxDeliveries int) (int, error) {
	limit, _, problem := deliveryLimit(maxDeliveries)
	if problem != "" {
		return 0, argError(fn, "MaxDeliveries", "%s", problem)
	}
	return limit, nil
}
