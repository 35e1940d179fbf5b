package driver_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/producer"
)

// serverOptions reaches the server the examples run against, named by
// $PELWARDEN_TEST_REDIS_URL (`make test` starts one in a container). The
// examples are skipped without it: this module's tests need no Docker.
var serverOptions *redis.Options

// envRedisURL is pelwardentest.EnvRedisURL (not imported: the test kit is a
// module of its own, with its container dependencies).
const envRedisURL = "PELWARDEN_TEST_REDIS_URL"

func TestMain(m *testing.M) {
	flag.Parse()
	if url := os.Getenv(envRedisURL); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			fmt.Fprintf(os.Stderr, "driver examples: %s: %v\n", envRedisURL, err)
			os.Exit(1)
		}
		serverOptions = opts
	} else {
		fmt.Fprintf(os.Stderr, "driver: examples skipped: they run against a server; set %s=redis://host:port (make test does)\n", envRedisURL)
		skip := "^Example"
		if cur := flag.Lookup("test.skip").Value.String(); cur != "" {
			skip = cur + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// A consumer that bills orders: nil acks, DeadLetter parks a malformed order
// at once with the reason, any other error is retried by the reclaim pass
// until MaxDeliveries.
func Example() {
	rdb := redis.NewClient(serverOptions) // e.g. &redis.Options{Addr: "127.0.0.1:6379"}
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, amount := range []string{"12.50", "oops", "7.00"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "{orders}", Values: []string{"amount", amount}})
	}
	done := make(chan struct{}, 3)
	c, err := driver.New(rdb, driver.Config{
		Stream: "{orders}", Group: "billing", Consumer: "billing-1",
		CreateGroup: true, // start the group at the first entry of the stream
		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			defer func() { done <- struct{}{} }()
			amount, _ := m.Value("amount")
			if !strings.Contains(amount, ".") {
				return driver.DeadLetter(fmt.Errorf("malformed amount %q", amount))
			}
			fmt.Println("billed", amount)
			return nil
		}),
		Concurrency: 1, // in order, for this example's output
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	for range 3 {
		<-done
	}
	cancel() // graceful: in-flight handlers finish, acks are flushed
	if err := <-stopped; err != nil {
		panic(err)
	}

	dead, _ := rdb.XRange(context.Background(), "{orders}:dead", "-", "+").Result()
	fmt.Println("dead-lettered:", dead[0].Values["amount"], "-", dead[0].Values[pelwarden.FieldError])
	// Output:
	// billed 12.50
	// billed 7.00
	// dead-lettered: oops - malformed amount "oops"
}

// Transient failures: RetryAfter keeps the entry pending and out of reach
// until the delay has passed; after MaxDeliveries attempts the reclaim pass
// dead-letters it with reason max_deliveries.
func ExampleRetryAfter() {
	rdb := redis.NewClient(serverOptions)
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "{payments}", Values: []string{"card", "4242"}})

	attempts := make(chan int64, 10)
	c, err := driver.New(rdb, driver.Config{
		Stream: "{payments}", Group: "charge", CreateGroup: true,
		MaxDeliveries: 3,
		MinIdle:       200 * time.Millisecond,
		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			attempts <- m.Deliveries
			return driver.RetryAfter(100*time.Millisecond, errors.New("payment provider unavailable"))
		}),
		Tuning: driver.Tuning{ReclaimInterval: 50 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	for range 3 {
		fmt.Println("attempt", <-attempts)
	}
	for {
		n, _ := rdb.XLen(ctx, "{payments}:dead").Result()
		if n == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-stopped
	dead, _ := rdb.XRange(context.Background(), "{payments}:dead", "-", "+").Result()
	fmt.Println("dead-lettered after", dead[0].Values[pelwarden.FieldDeliveries], "deliveries:", dead[0].Values[pelwarden.FieldReason])
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// dead-lettered after 3 deliveries: max_deliveries
}

// A high-volume stream with fast handlers needs no tuning: the consumer
// sizes its window by itself (up to MaxInHand entries held), so while the
// handlers work on one read's entries the next read is already on its way,
// and acks go out batched. See "Flow control" in docs/guides/consumers.md and
// BENCHMARKS.md for what the defaults reach.
func Example_throughput() {
	rdb := redis.NewClient(serverOptions)
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const n = 5000
	p := rdb.Pipeline()
	for i := range n {
		p.XAdd(ctx, &redis.XAddArgs{Stream: "{clicks}", Values: []any{"page", i % 7}})
	}
	if _, err := p.Exec(ctx); err != nil {
		panic(err)
	}
	var views [7]atomic.Int64
	handled := make(chan struct{}, n)
	c, err := driver.New(rdb, driver.Config{
		Stream: "{clicks}", Group: "stats", CreateGroup: true,
		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			page, _ := m.Value("page")
			i, err := strconv.Atoi(page)
			if err != nil || i < 0 || i >= len(views) {
				return driver.DeadLetter(fmt.Errorf("bad page %q", page))
			}
			views[i].Add(1)
			handled <- struct{}{}
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	for range n {
		<-handled
	}
	cancel()
	if err := <-stopped; err != nil {
		panic(err)
	}
	pending, _ := rdb.XPending(context.Background(), "{clicks}", "stats").Result()
	fmt.Println("page 0 views:", views[0].Load(), "pending:", pending.Count)
	// Output:
	// page 0 views: 715 pending: 0
}

// A partitioned stream: the producer sends each customer's orders to one
// partition (pelwarden.PartitionFor), and one Consumer reads all of them
// with Config.Streams; Message.Stream names the partition of each entry.
func Example_partitions() {
	rdb := redis.NewClient(serverOptions)
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	parts, err := pelwarden.Partitions("example-orders", 4)
	if err != nil {
		panic(err)
	}
	p, err := producer.New(rdb, producer.Config{Partitions: parts})
	if err != nil {
		panic(err)
	}
	const n = 100
	for i := range n {
		customer := "customer-" + strconv.Itoa(i%10)
		if _, err := p.Publish(ctx, customer, "customer", customer, "order", strconv.Itoa(i)); err != nil {
			panic(err)
		}
	}
	var misplaced atomic.Int64
	handled := make(chan struct{}, n)
	c, err := driver.New(rdb, driver.Config{
		Streams: parts, Group: "billing", CreateGroup: true,
		Handler: driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			customer, _ := m.Value("customer")
			if m.Stream != p.StreamFor(customer) {
				misplaced.Add(1)
			}
			handled <- struct{}{}
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	for range n {
		<-handled
	}
	cancel()
	if err := <-stopped; err != nil {
		panic(err)
	}
	fmt.Println("handled:", n, "misplaced:", misplaced.Load())
	// Output:
	// handled: 100 misplaced: 0
}

// Retention: with TrimInterval the consumer deletes what every group of the
// stream has delivered and acknowledged. A second group that has not read
// the entries yet ("audit") holds them; once it acknowledges them, the next
// trim removes them.
func ExampleConfig_trimInterval() {
	rdb := redis.NewClient(serverOptions)
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const stream = "{example-trim}"
	rdb.Del(ctx, stream)
	rdb.XGroupCreateMkStream(ctx, stream, "billing", "0")
	rdb.XGroupCreateMkStream(ctx, stream, "audit", "0")
	for _, order := range []string{"a", "b", "c"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"order", order}})
	}
	var handled atomic.Int64
	c, err := driver.New(rdb, driver.Config{
		Stream: stream, Group: "billing", Consumer: "billing-1",
		TrimInterval: 50 * time.Millisecond, // off by default: deleting data is asked for
		Handler: driver.HandlerFunc(func(context.Context, *driver.Message) error {
			handled.Add(1)
			return nil
		}),
	})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- c.Run(ctx) }()
	waitFor := func(cond func() bool) {
		for deadline := time.Now().Add(time.Minute); !cond() && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	lib := pelwarden.NewLibrary(rdb)
	waitFor(func() bool { return handled.Load() == 3 })
	plan, err := lib.Trim(ctx, pelwarden.TrimArgs{Stream: stream, DryRun: true}) // what a trim would do now
	if err != nil {
		panic(err)
	}
	fmt.Println("billing handled", handled.Load(), "- held back by", plan.Holder, "- length", plan.Length)

	// The audit service reads and acknowledges everything.
	msgs, _ := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "audit", Consumer: "audit-1", Streams: []string{stream, ">"}}).Result()
	for _, m := range msgs[0].Messages {
		rdb.XAck(ctx, stream, "audit", m.ID)
	}
	waitFor(func() bool { return rdb.XLen(ctx, stream).Val() == 0 })
	fmt.Println("after the audit group acknowledged: length", rdb.XLen(ctx, stream).Val())
	cancel()
	if err := <-stopped; err != nil {
		panic(err)
	}
	// Output:
	// billing handled 3 - held back by audit - length 3
	// after the audit group acknowledged: length 0
}
