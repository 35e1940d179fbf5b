package pelwardenotel

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden"
	"github.com/pelwarden/pelwarden/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func recorder(t *testing.T) (*tracetest.SpanRecorder, Option) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, WithTracerProvider(tp)
}

// publish runs the injector under a parent span and returns the fields
// and the parent.
func publish(t *testing.T, opt Option) ([]pelwarden.Field, trace.SpanContext) {
	t.Helper()
	var o config = newConfig([]Option{opt})
	ctx, parent := o.tracer().Start(context.Background(), "checkout")
	defer parent.End()
	fields := Injector(opt).Inject(ctx, "{orders}", []pelwarden.Field{{Name: "n", Value: "1"}, {Name: pelwarden.FieldTraceParent, Value: "stale"}})
	return fields, parent.SpanContext()
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	t.Fatalf("no span %q among %d", name, len(rec.Ended()))
	return nil
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		out[a.Key] = a.Value
	}
	return out
}

func TestInjectorWritesTheTraceFields(t *testing.T) {
	t.Parallel()
	rec, opt := recorder(t)
	fields, parent := publish(t, opt)
	create := spanNamed(t, rec, "create {orders}")
	require.Equal(t, trace.SpanKindProducer, create.SpanKind())
	require.Equal(t, parent.SpanID(), create.Parent().SpanID(), "the create span is a child of the publish")
	n := 0
	for _, f := range fields {
		if f.Name == pelwarden.FieldTraceParent {
			n++
			require.Contains(t, f.Value, create.SpanContext().SpanID().String())
		}
	}
	require.Equal(t, 1, n, "the stale traceparent is replaced")
	require.Equal(t, "n", fields[0].Name, "the entry's fields keep their order")
}

func TestHandlerContinuesTheProducersTrace(t *testing.T) {
	t.Parallel()
	rec, opt := recorder(t)
	fields, _ := publish(t, opt)
	create := spanNamed(t, rec, "create {orders}")
	var inHandler trace.SpanContext
	h := Handler(driver.HandlerFunc(func(ctx context.Context, m *driver.Message) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	}), opt)
	m := &driver.Message{ID: "5-1", Fields: fields, Deliveries: 1, Stream: "{orders}", Group: "billing", Consumer: "c1"}
	require.NoError(t, h.Handle(context.Background(), m))

	process := spanNamed(t, rec, "process {orders}")
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind())
	require.Equal(t, create.SpanContext().TraceID(), process.SpanContext().TraceID(), "one trace from producer to handler")
	require.Equal(t, create.SpanContext().SpanID(), process.Parent().SpanID())
	require.Equal(t, process.SpanContext().SpanID(), inHandler.SpanID(), "the handler runs under the span")
	a := attrs(process)
	require.Equal(t, "redis", a["messaging.system"].AsString())
	require.Equal(t, "process", a["messaging.operation.type"].AsString())
	require.Equal(t, "{orders}", a["messaging.destination.name"].AsString())
	require.Equal(t, "billing", a["messaging.consumer.group.name"].AsString())
	require.Equal(t, "5-1", a["messaging.message.id"].AsString())
	require.Equal(t, "c1", a["messaging.client.id"].AsString())
	require.EqualValues(t, 1, a[AttrDeliveries].AsInt64())
	require.Equal(t, codes.Unset, process.Status().Code)
}

func TestHandlerStartsANewLinkedTraceOnRedelivery(t *testing.T) {
	t.Parallel()
	rec, opt := recorder(t)
	fields, _ := publish(t, opt)
	create := spanNamed(t, rec, "create {orders}")
	h := Handler(driver.HandlerFunc(func(context.Context, *driver.Message) error { return nil }), opt)
	require.NoError(t, h.Handle(context.Background(), &driver.Message{ID: "5-1", Fields: fields, Deliveries: 3, Stream: "{orders}"}))
	process := spanNamed(t, rec, "process {orders}")
	require.NotEqual(t, create.SpanContext().TraceID(), process.SpanContext().TraceID(), "a new trace")
	require.False(t, process.Parent().IsValid(), "a root span")
	require.Len(t, process.Links(), 1)
	require.Equal(t, create.SpanContext().SpanID(), process.Links()[0].SpanContext.SpanID(), "linked to the producer")
	require.EqualValues(t, 3, attrs(process)[AttrDeliveries].AsInt64())
}

func TestHandlerRecordsFailures(t *testing.T) {
	t.Parallel()
	rec, opt := recorder(t)
	boom := errors.New("boom")
	for _, c := range []struct {
		err  error
		want string
	}{
		{boom, "*errors.errorString"},
		{driver.DeadLetter(boom), "pelwarden.dead_letter"},
	} {
		h := Handler(driver.HandlerFunc(func(context.Context, *driver.Message) error { return c.err }), opt)
		require.ErrorIs(t, h.Handle(context.Background(), &driver.Message{ID: "1-0", Stream: "{s}", Deliveries: 1}), boom)
		span := rec.Ended()[len(rec.Ended())-1]
		require.Equal(t, codes.Error, span.Status().Code)
		require.Equal(t, c.want, attrs(span)["error.type"].AsString())
		require.False(t, span.Parent().IsValid(), "no trace fields: a root span")
	}
	h := Handler(driver.HandlerFunc(func(context.Context, *driver.Message) error { panic("kaput") }), opt)
	require.PanicsWithValue(t, "kaput", func() { _ = h.Handle(context.Background(), &driver.Message{ID: "1-0", Stream: "{s}"}) })
	span := rec.Ended()[len(rec.Ended())-1]
	require.Equal(t, "panic", attrs(span)["error.type"].AsString())
}
