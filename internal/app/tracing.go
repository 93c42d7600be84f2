package app

import (
	"context"
	"fmt"
	"runtime/debug"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Tracing: off unless an OTLP endpoint is configured (Telemetry.Tracing). Then
// spans go through a batch span processor to an OTLP/HTTP (protobuf)
// exporter, which reads the standard OTEL_EXPORTER_OTLP_* variables itself
// (endpoint, headers, timeout, TLS); the SDK reads OTEL_TRACES_SAMPLER and
// OTEL_BSP_*, the resource OTEL_RESOURCE_ATTRIBUTES.

// propagator reads and writes the trace context of requests: W3C
// tracecontext and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// newTracerProvider builds the OTLP tracer provider of cfg. Its Shutdown
// flushes the spans not yet exported.
func newTracerProvider(ctx context.Context, cfg Telemetry) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := tracingResource(ctx, cfg)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// tracingResource names this process in traces: service.name (OTEL_SERVICE_NAME,
// default "stock"), service.version (the module version the binary was
// built at, when known), what OTEL_RESOURCE_ATTRIBUTES adds, and the SDK's.
func tracingResource(ctx context.Context, cfg Telemetry) (*resource.Resource, error) {
	// Later options win: the defaults, then OTEL_RESOURCE_ATTRIBUTES, then
	// OTEL_SERVICE_NAME.
	opts := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(semconv.ServiceName("stock"))}
	if v := buildVersion(); v != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceVersion(v)))
	}
	opts = append(opts, resource.WithFromEnv())
	if cfg.ServiceName != "" {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)))
	}
	res, err := resource.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	return res, nil
}

// buildVersion is the main module's version in the build info ("" when the
// binary was built without one).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "(devel)" {
		return ""
	}
	return bi.Main.Version
}
