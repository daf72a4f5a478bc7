package serve

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/tracing"
)

func useSampled(tp trace.TracerProvider, ratio float64) { tracing.UseSampled(tp, ratio) }
