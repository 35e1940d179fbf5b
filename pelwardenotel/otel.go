// Package pelwardenotel traces pelwarden with OpenTelemetry: a producer
// injector that writes the W3C trace context of each publish into the
// entry's reserved fields (pelwarden.FieldTraceParent and
// pelwarden.FieldTraceState), and a driver handler middleware that extracts
// it and runs each handler under a CONSUMER span named "process {stream}",
// following the OpenTelemetry messaging semantic conventions.
//
// It is a module of its own (github.com/pelwarden/pelwarden/pelwardenotel),
// so programs that do not trace never depend on the OpenTelemetry SDK
// through pelwarden. Redis commands themselves are traced by go-redis's
// redisotel.
//
//	p, _ := producer.New(rdb, producer.Config{Partitions: parts, Injector: pelwardenotel.Injector()})
//	c, _ := driver.New(rdb, driver.Config{Streams: parts, Group: "billing",
//		Handler: pelwardenotel.Handler(billing)})
//
// # Traces
//
// The injector starts a PRODUCER span "create {stream}" per entry, as a
// child of the publish's context, and injects its context. On an entry's
// first delivery the handler's span is a child of that span, so the
// producer's trace continues into the handler. A redelivered entry
// (Message.Deliveries > 1: its first handler failed, or its consumer died)
// starts a new trace, linked to the producer's span: the retry is its own
// unit of work, and one long trace does not collect every retry.
package pelwardenotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
	"github.com/pelwarden/pelwarden/producer"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/pelwarden/pelwarden/pelwardenotel"

// Attribute keys: the messaging semantic conventions' and pelwarden's own.
const (
	// MessagingSystem is "redis" on every span.
	MessagingSystem = "redis"
	// AttrDeliveries is the entry's delivery count, this delivery included.
	AttrDeliveries = attribute.Key("pelwarden.deliveries")
)

var (
	attrSystem        = attribute.Key("messaging.system")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrOperationName = attribute.Key("messaging.operation.name")
	attrDestination   = attribute.Key("messaging.destination.name")
	attrGroup         = attribute.Key("messaging.consumer.group.name")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrClientID      = attribute.Key("messaging.client.id")
	attrErrorType     = attribute.Key("error.type")
)

// Option configures the injector and the middleware.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the TracerProvider (default: the global one,
// otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithPropagator sets the propagator that reads and writes the fields
// (default: W3C trace context, propagation.TraceContext{}).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

func newConfig(opts []Option) config {
	c := config{tp: otel.GetTracerProvider(), prop: propagation.TraceContext{}}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func (c config) tracer() trace.Tracer { return c.tp.Tracer(ScopeName) }

// Injector returns a producer.Injector that starts a PRODUCER span "create
// {stream}" per entry and writes its context into the entry's
// pelwarden.FieldTraceParent and pelwarden.FieldTraceState fields
// (replacing fields of those names). Without a span in the publish's
// context the entry's span starts a new trace.
func Injector(opts ...Option) producer.Injector {
	c := newConfig(opts)
	return producer.InjectorFunc(func(ctx context.Context, stream string, fields []pelwarden.Field) []pelwarden.Field {
		ctx, span := c.tracer().Start(ctx, "create "+stream, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attrSystem.String(MessagingSystem), attrOperationType.String("create"),
				attrOperationName.String("create"), attrDestination.String(stream)))
		defer span.End()
		carrier := propagation.MapCarrier{}
		c.prop.Inject(ctx, carrier)
		out := fields[:0:0]
		for _, f := range fields {
			if f.Name != pelwarden.FieldTraceParent && f.Name != pelwarden.FieldTraceState {
				out = append(out, f)
			}
		}
		for _, k := range []string{pelwarden.FieldTraceParent, pelwarden.FieldTraceState} {
			if v := carrier.Get(k); v != "" {
				out = append(out, pelwarden.Field{Name: k, Value: v})
			}
		}
		return out
	})
}

// fieldCarrier reads an entry's fields as a propagation carrier.
type fieldCarrier []pelwarden.Field

func (f fieldCarrier) Get(key string) string {
	for _, x := range f {
		if x.Name == key {
			return x.Value
		}
	}
	return ""
}

func (f fieldCarrier) Set(string, string) {}

func (f fieldCarrier) Keys() []string {
	keys := make([]string, len(f))
	for i, x := range f {
		keys[i] = x.Name
	}
	return keys
}

// Handler wraps next so that it runs under a CONSUMER span "process
// {stream}" with the messaging attributes (messaging.system "redis",
// messaging.destination.name, messaging.consumer.group.name,
// messaging.message.id, messaging.client.id, error.type on failure) and
// pelwarden.deliveries. The producer's context comes from the entry's
// trace fields: the span is its child on the first delivery, and a new
// trace linked to it on a redelivery. An error or a panic of next marks
// the span as failed (a panic is recorded and passed on to the driver,
// which recovers it).
func Handler(next driver.Handler, opts ...Option) driver.Handler {
	c := newConfig(opts)
	return driver.HandlerFunc(func(ctx context.Context, m *driver.Message) (err error) {
		sent := trace.SpanContextFromContext(c.prop.Extract(context.Background(), fieldCarrier(m.Fields)))
		start := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attrSystem.String(MessagingSystem), attrOperationType.String("process"),
				attrOperationName.String("process"), attrDestination.String(m.Stream),
				attrGroup.String(m.Group), attrMessageID.String(m.ID), attrClientID.String(m.Consumer),
				AttrDeliveries.Int64(m.Deliveries)),
		}
		switch {
		case !sent.IsValid():
		case m.Deliveries > 1:
			start = append(start, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sent}))
		default:
			ctx = trace.ContextWithRemoteSpanContext(ctx, sent)
			start = append(start, trace.WithLinks(trace.Link{SpanContext: sent}))
		}
		ctx, span := c.tracer().Start(ctx, "process "+m.Stream, start...)
		defer func() {
			if p := recover(); p != nil {
				span.SetAttributes(attrErrorType.String("panic"))
				span.SetStatus(codes.Error, fmt.Sprint(p))
				span.End()
				panic(p)
			}
			if err != nil {
				span.SetAttributes(attrErrorType.String(errorType(err)))
				span.SetStatus(codes.Error, err.Error())
				span.RecordError(err)
			}
			span.End()
		}()
		return next.Handle(ctx, m)
	})
}

// errorType is a low-cardinality name of err: pelwarden's outcomes by
// name, other errors by their Go type.
func errorType(err error) string {
	var dl *driver.DeadLetterError
	var ra *driver.RetryAfterError
	switch {
	case errors.As(err, &dl):
		return "pelwarden.dead_letter"
	case errors.As(err, &ra):
		return "pelwarden.retry_after"
	}
	return reflect.TypeOf(err).String()
}
