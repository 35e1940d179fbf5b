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
// of pelwarden's test matrix; the README lists the tests the suite skips
// for the other Features and why.
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
//		                                               └─ Nack: RetryAfter(NackDelay) ──> release fn
//		                                                        ──> next reclaim pass: claim fn counts the
//		                                                            delivery, dead-letters at MaxDeliveries
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
// The Publisher is synchronous and pipelined: Publish(topic, msgs...)
// sends all of msgs in one round trip per producer.DefaultMaxBatch and
// returns once the server has added them; Close waits for publishes in
// progress.
package pelwardenwatermill
