package pelwardenwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardenwatermill"
)

// A router with one handler: the first delivery of a message fails (the
// router Nacks it), the redelivery succeeds. The delivery count is the
// server's.
func Example_router() {
	rdb := servers[0].client() // any go-redis client, e.g. redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	topic := "orders-" + watermill.NewShortUUID()

	pub, err := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	sub, err := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{
		Group:  "billing",
		Driver: driver.Config{MaxDeliveries: 5}, // the 5th failure dead-letters instead
	})
	if err != nil {
		panic(err)
	}
	defer sub.Close()

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	router.AddConsumerHandler("bill", topic, sub, func(msg *message.Message) error {
		n := msg.Metadata.Get(pelwardenwatermill.MetadataDeliveries)
		if n == "1" {
			fmt.Println("delivery", n, "failed:", string(msg.Payload))
			return errors.New("card declined") // the router Nacks
		}
		fmt.Println("delivery", n, "billed:", string(msg.Payload))
		close(done)
		return nil // the router Acks
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = router.Run(ctx) }()
	<-router.Running()

	if err := pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("order 42"))); err != nil {
		panic(err)
	}
	<-done
	_ = router.Close()
	// Output:
	// delivery 1 failed: order 42
	// delivery 2 billed: order 42
}

// A message Nacked MaxDeliveries times is dead-lettered by the server's
// reclaim pass, with reason max_deliveries, instead of coming back.
func ExampleSubscriber_Subscribe() {
	rdb := servers[0].client()
	defer rdb.Close()
	topic := "payments-" + watermill.NewShortUUID()

	pub, _ := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
	defer pub.Close()
	sub, _ := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{
		Group: "payments", Driver: driver.Config{MaxDeliveries: 2}})
	defer sub.Close()

	_ = pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("poison")))
	msgs, _ := sub.Subscribe(context.Background(), topic)
	for range 2 {
		msg := <-msgs
		fmt.Println("nack delivery", msg.Metadata.Get(pelwardenwatermill.MetadataDeliveries))
		msg.Nack()
	}

	dead, _ := pelwardenwatermill.DeadLetterStream(topic)
	for {
		records, _ := rdb.XRange(context.Background(), dead, "-", "+").Result()
		if len(records) > 0 {
			fmt.Println("dead-lettered:", records[0].Values[pelwardenwatermill.FieldPayload], records[0].Values[pelwarden.FieldReason])
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Output:
	// nack delivery 1
	// nack delivery 2
	// dead-lettered: poison max_deliveries
}

// A message that can never be processed goes to the dead-letter stream at
// once, with the handler's error, instead of being retried MaxDeliveries
// times. The record reads back with pelwarden.ParseDeadLetterMessage.
func ExampleDeadLetter() {
	rdb := servers[0].client()
	defer rdb.Close()
	topic := "invoices-" + watermill.NewShortUUID()

	pub, _ := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
	defer pub.Close()
	sub, _ := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: "invoicing"})
	defer sub.Close()

	_ = pub.Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("forty-two")))
	msgs, _ := sub.Subscribe(context.Background(), topic)
	msg := <-msgs
	if _, err := strconv.Atoi(string(msg.Payload)); err != nil {
		pelwardenwatermill.DeadLetter(msg, fmt.Errorf("malformed amount %q", msg.Payload))
	}

	dead, _ := pelwardenwatermill.DeadLetterStream(topic)
	for {
		records, _ := rdb.XRange(context.Background(), dead, "-", "+").Result()
		if len(records) > 0 {
			d, _ := pelwarden.ParseDeadLetterMessage(records[0])
			fmt.Println(d.Reason, "after", d.Deliveries, "delivery:", d.Error)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Output:
	// handler after 1 delivery: malformed amount "forty-two"
}

// The fields of a published message (DefaultMarshaler's layout).
func ExampleDefaultMarshaler_Marshal() {
	msg := message.NewMessage("0b7e5c1e", []byte(`{"amount": 12.5}`))
	msg.Metadata.Set("customer", "c-7")
	msg.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	fields, _ := pelwardenwatermill.DefaultMarshaler{}.Marshal("orders", msg)
	for _, f := range fields {
		fmt.Printf("%s = %s\n", f.Name, f.Value)
	}
	// Output:
	// wm.uuid = 0b7e5c1e
	// wm.md.customer = c-7
	// traceparent = 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// wm.payload = {"amount": 12.5}
}
