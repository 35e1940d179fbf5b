package ops

import (
	"errors"
	"testing"

	"github.com/pelwarden/pelwarden"
)

func TestCursors(t *testing.T) {
	t.Parallel()
	if s, ok := After("5-1"); s != "(5-1" || !ok {
		t.Fatalf("After(5-1) = %q, %v", s, ok)
	}
	if _, ok := After(MaxStreamID); ok {
		t.Fatal("nothing comes after the largest id")
	}
	if s, ok := Before("5-1"); s != "(5-1" || !ok {
		t.Fatalf("Before(5-1) = %q, %v", s, ok)
	}
	if _, ok := Before("0-0"); ok {
		t.Fatal("nothing comes before 0-0")
	}
	for id, want := range map[string]string{
		"5-1": "5-0", "5-0": "4-18446744073709551615", "0-1": "0-0",
	} {
		p, _ := pelwarden.ParseID(id)
		if got := predecessor(p).String(); got != want {
			t.Fatalf("predecessor(%s) = %s, want %s", id, got, want)
		}
	}
	if !lessID("9-0", "10-0") || lessID("10-1", "10-1") || !lessID("10-1", "10-2") {
		t.Fatal("lessID orders numerically")
	}
}

func TestDecodeEntries(t *testing.T) {
	t.Parallel()
	got, err := DecodeEntries([]any{[]any{"1-0", []any{"a", "1", "a", "2"}}, []any{"2-0", nil}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "1-0" || len(got[0].Fields) != 2 || got[0].Fields[1] != (pelwarden.Field{Name: "a", Value: "2"}) || got[1].Fields != nil {
		t.Fatalf("DecodeEntries = %+v", got)
	}
	for _, bad := range []any{"nope", []any{"x"}, []any{[]any{1, nil}}, []any{[]any{"1-0", 7}}} {
		if _, err := DecodeEntries(bad); err == nil {
			t.Fatalf("DecodeEntries(%v) accepted", bad)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	ce := commandError("XRANGE", "k", base)
	if !errors.Is(ce, base) || ce.Error() != "XRANGE k: boom" {
		t.Fatalf("CommandError: %v", ce)
	}
	if err := interrupted(base); !errors.Is(err, ErrInterrupted) || !errors.Is(err, base) {
		t.Fatalf("interrupted: %v", err)
	}
	ws := &WorkStreamError{Key: "s", Groups: []string{"a", "b"}}
	if ws.Error() != "s has consumer groups (a, b): it is a work stream, not a dead-letter stream; nothing deleted" {
		t.Fatal(ws.Error())
	}
	if _, err := Redrive(t.Context(), nil, RedriveOptions{DeadLetterStream: "d", Rate: -1}); err == nil {
		t.Fatal("a negative rate is refused before anything runs")
	}
	var ae *pelwarden.ArgumentError
	if _, err := Poison(t.Context(), nil, PoisonOptions{MaxDeliveries: pelwarden.NoDeliveryLimit}); !errors.As(err, &ae) || ae.Field != "MaxDeliveries" {
		t.Fatalf("Poison without a delivery limit: %v", err)
	}
	if _, err := Reap(t.Context(), nil, ReapOptions{}); !errors.As(err, &ae) || ae.Field != "Idle" {
		t.Fatalf("Reap without Idle: %v", err)
	}
}
