package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestParseTraceparent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{good, true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true, true},   // sampled and random
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-07", false, false}, // reserved in version 00
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-07", true, true},   // a later version's flags dropped
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true, true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", false, false}, // 00 is exactly 55
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false, false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false, false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"", false, false},
	} {
		sc, ok := ParseTraceparent(tc.in, "")
		if ok != tc.ok || (ok && sc.IsSampled() != tc.sampled) {
			t.Errorf("%q: ok %v sampled %v, want %v %v", tc.in, ok, sc.IsSampled(), tc.ok, tc.sampled)
		}
		if ok && (!sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736") {
			t.Errorf("%q: %v", tc.in, sc)
		}
	}
	sc, _ := ParseTraceparent(good, "vendor=x,other=y")
	if sc.TraceState().String() != "vendor=x,other=y" {
		t.Errorf("tracestate %q", sc.TraceState().String())
	}
	if sc, _ := ParseTraceparent(good, "not a state"); sc.TraceState().Len() != 0 {
		t.Errorf("an invalid tracestate was kept")
	}
	if got := Traceparent(sc); got != good {
		t.Errorf("Traceparent = %q, want %q", got, good)
	}
}

// FuzzTraceparent: the hand-written parser agrees with OpenTelemetry's
// W3C propagator on what it accepts (the propagator is the reference;
// ours runs on every traced gRPC call and must not allocate) and
// formats what it accepts back to the same ids.
func FuzzTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, tp string) {
		sc, ok := ParseTraceparent(tp, "")
		ref := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		if ok != ref.IsValid() {
			t.Fatalf("%q: ours %v, the propagator's %v", tp, ok, ref.IsValid())
		}
		if !ok {
			return
		}
		if sc.TraceID() != ref.TraceID() || sc.SpanID() != ref.SpanID() || sc.TraceFlags() != ref.TraceFlags() {
			t.Fatalf("%q: ours %v, the propagator's %v", tp, sc, ref)
		}
		if out := Traceparent(sc); !strings.HasPrefix(out, "00-"+tp[3:52]) {
			t.Fatalf("%q formatted as %q", tp, out)
		}
	})
}
