// Package pelwardenwatermill runs Watermill (github.com/ThreeDotsLabs/watermill)
// on pelwarden: a message.Subscriber on pelwarden's driver and a
// message.Publisher on its producer, so handlers, routers and middleware
// written for Watermill keep working while poison messages are counted and
// dead-lettered on the server, atomically.
//
// It is a module of its own (github.com/pelwarden/pelwarden/pelwardenwatermill),
// so Watermill never enters the build of a user of pelwarden alone.
//
//	pub, _ := pelwardenwatermill.NewPublisher(rdb, pelwardenwatermill.PublisherConfig{})
//	sub, _ := pelwardenwatermill.NewSubscriber(rdb, pelwardenwatermill.SubscriberConfig{Group: "billing"})
//	router.AddConsumerHandler("bill", "orders", sub, bill)
//
// It passes Watermill's universal Pub/Sub suite (pubsub/tests.TestPubSub,
// not -short) with Features ConsumerGroups and Persistent on every server
// of pelwarden's test matrix (make watermill-matrix; make test runs it on
// the three servers where it tests a path of its own); docs/guides/watermill.md lists
// the tests the suite skips for the other Features and why.
//
// # Topics and streams
//
// A topic is the stream of the same name by default, as in
// watermill-redisstream (Topics.Stream maps it otherwise), with its
// dead-letter stream in its cluster slot (DeadLetterStream); with
// Topics.Partitions it is spread over pelwarden.Partitions and the
// Publisher places each message by its PartitionKey.
//
// # How a subscription runs
//
// Subscribe starts one driver.Consumer (Concurrency 1) for the topic; its
// handler hands each message out on the subscription's channel and waits
// for the answer:
//
//		driver read / reclaim loops ──> window ──> handler (one at a time) ──out chan──> your code
//		                                               │  <── Ack / Nack ───────────────────┘
//		                                               ├─ Ack:  nil ──> batched, fenced ack
//		                                               ├─ Nack: RetryAfter(NackDelay) ──> release fn
//		                                               │        ──> next reclaim pass: claim fn counts the
//		                                               │            delivery, dead-letters at MaxDeliveries
//		                                               └─ DeadLetter(msg, err): driver.DeadLetter(err)
//		                                                        ──> deadletter fn at once (reason handler,
//		                                                            err's text), atomically with the ack
//
//	  - The Subscriber owns the goroutines of its subscriptions: two per
//	    subscription (the driver's Run, and one that waits for Close or
//	    Subscribe's context), plus the driver's own loops per stream. Close
//	    stops them all and waits; it never closes the Redis client.
//	  - The driver reads ahead (its flow-control window), so entries wait
//	    in the consumer while one is out; they are leased (their lease is
//	    extended like running ones) and go back to the group at once when
//	    the subscription closes. An entry read counts as a delivery on the
//	    server even if the subscription closed before handing it out.
//	  - A subscription's messages reach the channel in the order the
//	    consumer got them: new entries in stream order, then a reclaimed
//	    (Nacked) one when the next reclaim pass brings it back, so a Nack
//	    reorders. Run more subscriptions (or a Router with several
//	    handlers) for parallel work.
//
// # Poison messages: DeadLetter, Retry and PoisonQueue
//
// The adapter dead-letters on the server, atomically: the dead-letter
// record (the entry's fields plus pelwarden's metadata: original id,
// stream, group, consumer, delivery count, reason, error text) is written
// in the same step as the ack, so a crash can neither lose the message nor
// record it twice, and `pelwarden dlq` shows and redrives it. Two ways
// lead there:
//
//   - Nack retries: the message comes back (after NackDelay, spaced further
//     by Driver.Backoff) until it has been delivered Driver.MaxDeliveries
//     times (5 by default), then it is dead-lettered with reason
//     max_deliveries and no error text. Use it for failures that may pass.
//   - DeadLetter(msg, err) gives up at once: the message is dead-lettered
//     with reason handler and err's text after this one delivery. Use it
//     for a message that can never be processed (it does not parse, it
//     breaks a rule), so it costs neither MaxDeliveries attempts nor its
//     error. In a Router handler, call it and return nil.
//
// Watermill's own middleware does the same jobs in the process, and
// combines with the adapter's as follows:
//
//   - middleware.Retry retries the handler in the process, inside one
//     delivery: the server sees nothing until Retry gives up and the router
//     Nacks. Each delivery then runs the handler up to Retry.MaxRetries+1
//     times, so a poison message runs it MaxDeliveries × (MaxRetries+1)
//     times before it is dead-lettered, and holds the subscription (which
//     hands out one message at a time) for all of Retry's backoff. Prefer
//     the adapter's MaxDeliveries and Backoff, which count on the server
//     (a crash or a rebalance does not reset them) and let other messages
//     through between attempts; keep Retry, if at all, for a short in-process
//     retry of a transient error, and let it skip permanent ones
//     (Retry.ShouldRetry) that the handler gives to DeadLetter.
//   - middleware.PoisonQueue catches the handler's error, publishes the
//     message to another topic and returns nil, so the router Acks: the
//     adapter acknowledges the entry and never dead-letters it. The copy is
//     a new message on the poison topic, published apart from the ack (not
//     atomic: a crash between them loses it or leaves it in both), with the
//     reason in watermill metadata instead of pelwarden's record, so the
//     dead-letter tools (`pelwarden dlq`, pelwarden.ParseDeadLetter,
//     Redrive) do not see it. With this adapter use DeadLetter for poison
//     messages, and MaxDeliveries for those that keep failing, instead.
//
// The Publisher is synchronous and pipelined: Publish(topic, msgs...)
// sends all of msgs in one round trip per producer.DefaultMaxBatch and
// returns once the server has added them; Close waits for publishes in
// progress.
package pelwardenwatermill
