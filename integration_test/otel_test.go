package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/pelwardenotel"
	"github.com/pelwarden/pelwarden/producer"
)

// Producer to handler through a real server: the handler's span continues
// the producer's trace on the first delivery, and a redelivery (the first
// handler failed) starts a new trace linked to the producer's span.
func TestTracing(t *testing.T) {
	each(t, func(t *testing.T, s *target) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		opt := pelwardenotel.WithTracerProvider(tp)
		pt := newPartitionTest(t, 2)

		p, err := producer.New(s.rdb, producer.Config{Partitions: pt.parts, Injector: pelwardenotel.Injector(opt)})
		require.NoError(t, err)
		pctx, publish := tp.Tracer("test").Start(ctx, "publish")
		res, err := p.PublishBatch(pctx, []producer.Message{
			{Key: "ok", Fields: []pelwarden.Field{{Name: "kind", Value: "ok"}}},
			{Key: "flaky", Fields: []pelwarden.Field{{Name: "kind", Value: "flaky"}}},
		})
		publish.End()
		require.NoError(t, err)

		var mu sync.Mutex
		attempts := map[string]int{}
		done := make(chan struct{})
		h := pelwardenotel.Handler(driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[m.Stream+" "+m.ID]++
			kind, _ := m.Value("kind")
			if kind == "flaky" && attempts[m.Stream+" "+m.ID] == 1 {
				return errors.New("first attempt fails")
			}
			if attempts[res[0].Stream+" "+res[0].ID] > 0 && attempts[res[1].Stream+" "+res[1].ID] > 1 {
				select {
				case <-done:
				default:
					close(done)
				}
			}
			return nil
		}), opt)
		cfg := pt.config("traced")
		cfg.Handler, cfg.Backoff = h, []time.Duration{10 * time.Millisecond}
		stop := startConsumer(t, s.rdb, cfg)
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the entries were not handled")
		}
		require.NoError(t, stop())

		creates := map[string]trace.SpanContext{} // stream -> create span
		var process []sdktrace.ReadOnlySpan
		for _, sp := range rec.Ended() {
			switch sp.Name() {
			case "create " + res[0].Stream, "create " + res[1].Stream:
				require.Equal(t, publish.SpanContext().TraceID(), sp.SpanContext().TraceID())
				creates[sp.Name()[len("create "):]] = sp.SpanContext()
			case "process " + res[0].Stream, "process " + res[1].Stream:
				process = append(process, sp)
			}
		}
		require.Len(t, creates, 2)
		// Entries of two streams may share an id: spans are told apart by
		// stream and id.
		byDelivery := map[string][]sdktrace.ReadOnlySpan{}
		for _, sp := range process {
			var stream, id string
			for _, a := range sp.Attributes() {
				switch a.Key {
				case "messaging.message.id":
					id = a.Value.AsString()
				case "messaging.destination.name":
					stream = a.Value.AsString()
				}
			}
			byDelivery[stream+" "+id] = append(byDelivery[stream+" "+id], sp)
		}
		okSpan := byDelivery[res[0].Stream+" "+res[0].ID]
		require.Len(t, okSpan, 1)
		require.Equal(t, creates[res[0].Stream].TraceID(), okSpan[0].SpanContext().TraceID(), "first delivery: the producer's trace continues")
		require.Equal(t, creates[res[0].Stream].SpanID(), okSpan[0].Parent().SpanID())

		flaky := byDelivery[res[1].Stream+" "+res[1].ID]
		require.Len(t, flaky, 2, "a failed delivery and its redelivery")
		first, second := flaky[0], flaky[1]
		if first.StartTime().After(second.StartTime()) {
			first, second = second, first
		}
		require.Equal(t, creates[res[1].Stream].TraceID(), first.SpanContext().TraceID())
		require.NotEqual(t, creates[res[1].Stream].TraceID(), second.SpanContext().TraceID(), "the redelivery starts a new trace")
		require.Len(t, second.Links(), 1)
		require.Equal(t, creates[res[1].Stream].SpanID(), second.Links()[0].SpanContext.SpanID(), "linked to the producer's span")
	})
}
