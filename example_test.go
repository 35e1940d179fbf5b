package pelwarden_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden"
)

// A dead-letter record read with go-redis, as rdb.XRange(ctx,
// "{orders}:dead", "-", "+") returns it: the fields in a map, which
// ParseDeadLetterMessage splits into the entry's fields (sorted by name) and
// the metadata.
func ExampleParseDeadLetterMessage() {
	record := redis.XMessage{ID: "1700000000123-0", Values: map[string]any{
		"sku": "A-1", "amount": "oops",
		pelwarden.FieldOriginalID: "1699999999000-0", pelwarden.FieldStream: "{orders}",
		pelwarden.FieldGroup: "billing", pelwarden.FieldConsumer: "billing-1",
		pelwarden.FieldDeliveries: "1", pelwarden.FieldReason: pelwarden.ReasonHandler,
		pelwarden.FieldError: `malformed amount "oops"`, pelwarden.FieldDeadLetteredAt: "1700000000123",
		pelwarden.FieldMetaCount: "9",
	}}
	d, ok := pelwarden.ParseDeadLetterMessage(record)
	if !ok {
		fmt.Println("not a pelwarden record")
		return
	}
	fmt.Println(d.Stream, d.OriginalID, d.Group, d.Consumer, d.Deliveries)
	fmt.Println(d.Reason+":", d.Error)
	fmt.Println(d.DeadLetteredAt.UTC().Format("2006-01-02 15:04:05.000"))
	for _, f := range d.Fields {
		fmt.Println(f.Name, "=", f.Value)
	}
	// Output:
	// {orders} 1699999999000-0 billing billing-1 1
	// handler: malformed amount "oops"
	// 2023-11-14 22:13:20.123
	// amount = oops
	// sku = A-1
}
