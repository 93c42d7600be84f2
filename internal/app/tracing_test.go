package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/testlog"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	m.Run()
}

// Incoming trace context of the tests: the caller's trace and span.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// accessLine waits for the access log line of route with the given status.
func accessLine(t *testing.T, logs *testlog.Buffer, route string, status int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range logs.Records(t) {
			if l["msg"] == "request" && l["route"] == route && l["status"] == float64(status) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log line of %s %d in %d lines", route, status, len(logs.Records(t)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newServer starts a server over a database of its own with a debug-level
// JSON log (so 2xx requests are logged too), traced by tp when it is set,
// continuing the trace context of the peers in trust (STOCK_TRACE_TRUST).
func newServer(t *testing.T, tp trace.TracerProvider, trust ...string) (*apptest.Server, *testlog.Buffer) {
	t.Helper()
	cfg := apptest.Config(apptest.Database(t))
	cfg.Telemetry.LogLevel = "debug"
	cfg.Telemetry.TraceTrust = trust
	logs := &testlog.Buffer{}
	var opts []app.Option
	if tp != nil {
		opts = append(opts, app.WithTracerProvider(tp))
	}
	return apptest.StartLogged(t, cfg, app.NewLogger(cfg.Telemetry, logs), opts...), logs
}

// api is a client of srv with token that sends traceparent ("" sends none)
// with every request, as an instrumented caller's transport would.
func api(t *testing.T, srv *apptest.Server, token, traceparent string) *client.Client {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute}
	if traceparent != "" {
		hc.Transport = withTraceparent(traceparent)
	}
	c, err := client.New(srv.URL, client.WithToken(token), client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withTraceparent is a transport that sets its traceparent on every request.
type withTraceparent string

func (tp withTraceparent) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("traceparent", string(tp))
	return http.DefaultTransport.RoundTrip(req)
}

func setStock(t *testing.T, srv *apptest.Server, sku string, n int) {
	t.Helper()
	if _, err := api(t, srv, apptest.AdminToken, "").SetStock(t.Context(), sku, client.StockSetting{Available: int64(n)}); err != nil {
		t.Fatalf("SetStock(%q, %d): %v", sku, n, err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// order places an order of buyer and returns the answer's status (0: none
// came, a test error); traceparent "" sends none.
func order(t *testing.T, srv *apptest.Server, buyer, key, sku string, q int, traceparent string) int {
	t.Helper()
	o, err := api(t, srv, apptest.Token(t, buyer), traceparent).Place(t.Context(), key, sku, q)
	var p *client.Problem
	switch {
	case err == nil && o.Replayed:
		return http.StatusOK
	case err == nil:
		return http.StatusCreated
	case errors.As(err, &p):
		return p.Status
	}
	t.Errorf("order %s of %s: %v", key, sku, err)
	return 0
}

// traceSpans waits until the trace of id has n ended spans and returns them.
func traceSpans(t *testing.T, exp *tracetest.InMemoryExporter, id string, n int) []tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() == id {
				got = append(got, s)
			}
		}
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				t.Fatalf("trace %s has %d spans (%v); want %d", id, len(got), names(got), n)
			}
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func byName(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no span %q in %v", name, names(spans))
	return tracetest.SpanStub{}
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks that span s has the attributes of want (values as
// strings: "true", "1", "mysql").
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		a, ok := got[attribute.Key(k)]
		if !ok || a.String() != v {
			t.Errorf("span %s: %s = %q (present %v); want %q", s.Name, k, a.String(), ok, v)
		}
	}
}

func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("span %s's parent is %s; want %s (%s)", child.Name, child.Parent.SpanID(), parent.SpanContext.SpanID(), parent.Name)
	}
}

// An order through the whole stack, with the caller's traceparent: one
// trace that continues the caller's, server span -> stock.place ->
// stock.batch -> (stock.lock, stock.transaction), with the attributes of
// each and no buyer id; the access log line of the request carries the
// trace and the server span's ids.
func TestTraceOfAnOrder(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	srv, logs := newServer(t, tp, "127.0.0.1")
	setStock(t, srv, "SKU-T", 1)

	const buyer = "buyer-who-must-not-be-traced"
	if st := order(t, srv, buyer, "key-1", "SKU-T", 1, callerParent); st != http.StatusCreated {
		t.Fatalf("POST order = %d; want 201", st)
	}
	spans := traceSpans(t, exp, callerTrace, 5)
	server := byName(t, spans, "POST /v1/orders")
	place := byName(t, spans, "stock.place")
	batch := byName(t, spans, "stock.batch")
	lock := byName(t, spans, "stock.lock")
	tx := byName(t, spans, "stock.transaction")

	if server.SpanKind != trace.SpanKindServer || !server.Parent.IsRemote() || server.Parent.SpanID().String() != callerSpan {
		t.Errorf("server span: kind %v, parent %s (remote %v); want a server span under the caller's %s",
			server.SpanKind, server.Parent.SpanID(), server.Parent.IsRemote(), callerSpan)
	}
	wantAttrs(t, server, map[string]string{"http.request.method": "POST", "http.route": "/v1/orders", "http.response.status_code": "201"})
	wantChild(t, place, server)
	wantAttrs(t, place, map[string]string{"stock.sku": "SKU-T", "stock.strategy": "lock+version", "stock.quantity": "1", "stock.outcome": "created"})
	wantChild(t, batch, place)
	wantAttrs(t, batch, map[string]string{"stock.sku": "SKU-T", "stock.batch.size": "1"})
	wantChild(t, lock, batch)
	wantAttrs(t, lock, map[string]string{"stock.lock.acquired": "true", "stock.outcome": "acquired"})
	if _, ok := attrs(lock)["stock.lock.wait_ms"]; !ok {
		t.Errorf("stock.lock has no stock.lock.wait_ms")
	}
	wantChild(t, tx, batch)
	wantAttrs(t, tx, map[string]string{"db.system.name": "mysql", "stock.write": "versioned", "stock.attempt": "1", "stock.outcome": "committed"})
	for _, s := range spans {
		if s.Status.Code == codes.Error {
			t.Errorf("span %s has status error (%s) on a created order", s.Name, s.Status.Description)
		}
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), buyer) {
				t.Errorf("span %s attribute %s = %q names the buyer", s.Name, kv.Key, kv.Value.String())
			}
		}
	}

	line := accessLine(t, logs, "/v1/orders", http.StatusCreated)
	if line["trace_id"] != callerTrace || line["span_id"] != server.SpanContext.SpanID().String() {
		t.Errorf("access log trace_id %v span_id %v; want %s %s", line["trace_id"], line["span_id"], callerTrace, server.SpanContext.SpanID())
	}

	// A sold-out answer is the place span's outcome, not an error; without
	// a traceparent the request starts a trace of its own.
	if st := order(t, srv, "buyer-2", "key-2", "SKU-T", 1, ""); st != http.StatusConflict {
		t.Fatalf("POST order of a sold-out SKU = %d; want 409", st)
	}
	soldOut := accessLine(t, logs, "/v1/orders", http.StatusConflict)
	id, _ := soldOut["trace_id"].(string)
	if id == "" || id == callerTrace {
		t.Fatalf("sold-out access log trace_id = %q; want a new trace", id)
	}
	spans = traceSpans(t, exp, id, 5) // the first sold-out answer comes from a batch
	place = byName(t, spans, "stock.place")
	server = byName(t, spans, "POST /v1/orders")
	wantAttrs(t, place, map[string]string{"stock.outcome": "sold_out"})
	wantAttrs(t, server, map[string]string{"http.response.status_code": "409"})
	if server.Parent.IsValid() || place.Status.Code == codes.Error || server.Status.Code == codes.Error {
		t.Errorf("sold out: server parent %v, statuses %v %v; want a root span and no errors", server.Parent.IsValid(), server.Status, place.Status)
	}
}

// A caller's traceparent is believed only from a peer in
// STOCK_TRACE_TRUST: from any other, at a 0% sampler, a "sampled" flag
// records nothing and the logs carry a trace id of the server's own, not
// the caller's; from a trusted peer the caller's trace goes on, sampled.
func TestTraceContextOnlyFromTrustedPeers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		trust     []string
		continued bool
	}{
		{nil, false},
		{[]string{"10.0.0.0/8", "::1"}, false},
		{[]string{"127.0.0.0/8"}, true},
	} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
		t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(t.Context())) })
		srv, logs := newServer(t, tp, c.trust...)
		setStock(t, srv, "SKU-P", 1)
		if st := order(t, srv, "buyer-1", "key-1", "SKU-P", 1, callerParent); st != http.StatusCreated {
			t.Fatalf("trust %v: POST order = %d; want 201", c.trust, st)
		}
		line := accessLine(t, logs, "/v1/orders", http.StatusCreated)
		id, _ := line["trace_id"].(string)
		if !c.continued {
			if id == "" || id == callerTrace || len(exp.GetSpans()) != 0 {
				t.Errorf("trust %v, traceparent %s from 127.0.0.1: log trace_id %q, %d spans recorded; want a trace id of the server's own and none recorded (0%% sampler)",
					c.trust, callerParent, id, len(exp.GetSpans()))
			}
			continue
		}
		if id != callerTrace {
			t.Errorf("trust %v: log trace_id %q; want the caller's %s", c.trust, id, callerTrace)
		}
		traceSpans(t, exp, callerTrace, 5)
	}
}

// Orders that share a batch: the batch span is a child of one order's span
// and linked to the others, which link back to it.
func TestTraceOfABatch(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	srv, _ := newServer(t, tp)
	setStock(t, srv, "SKU-B", 100)

	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st := order(t, srv, "b"+itoa(i), "k", "SKU-B", 1, ""); st != http.StatusCreated {
				t.Errorf("order %d = %d; want 201", i, st)
			}
		}()
	}
	wg.Wait()
	// Every order's place span ends before its answer is written; the
	// batches' spans end after their unlock.
	deadline := time.Now().Add(5 * time.Second)
	var places, batches []tracetest.SpanStub
	for {
		places, batches = nil, nil
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "stock.place":
				places = append(places, s)
			case "stock.batch":
				batches = append(batches, s)
			}
		}
		sized := 0
		for _, b := range batches {
			sized += int(attrs(b)["stock.batch.size"].AsInt64())
		}
		if len(places) == n && sized == n || time.Now().After(deadline) {
			if len(places) != n || sized != n {
				t.Fatalf("%d place spans, batches of %d orders in all; want %d and %d", len(places), sized, n, n)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each place span is the parent of exactly one batch or linked to one.
	bySpan := map[trace.SpanID]tracetest.SpanStub{}
	for _, b := range batches {
		bySpan[b.SpanContext.SpanID()] = b
	}
	for _, p := range places {
		var parentOf, linked int
		for _, b := range batches {
			if b.Parent.SpanID() == p.SpanContext.SpanID() {
				parentOf++
			}
			for _, l := range b.Links {
				if l.SpanContext.SpanID() == p.SpanContext.SpanID() {
					linked++
				}
			}
		}
		backLinks := 0
		for _, l := range p.Links {
			if _, ok := bySpan[l.SpanContext.SpanID()]; ok {
				backLinks++
			}
		}
		if parentOf+linked != 1 || backLinks != linked {
			t.Errorf("place span %s: parent of %d batches, linked from %d, links to %d; want 1 batch in all, linked both ways",
				p.SpanContext.SpanID(), parentOf, linked, backLinks)
		}
	}
}

// Tracing off (no OTEL_ variables): a request with a traceparent is
// served, and its log lines carry no trace_id or span_id (a server that
// continued the caller's trace would log them).
func TestTracingOff(t *testing.T) {
	t.Parallel()
	srv, logs := newServer(t, nil)
	setStock(t, srv, "SKU-O", 1)
	if st := order(t, srv, "buyer-1", "key-1", "SKU-O", 1, callerParent); st != http.StatusCreated {
		t.Fatalf("POST order = %d; want 201", st)
	}
	accessLine(t, logs, "/v1/orders", http.StatusCreated)
	for _, l := range logs.Records(t) {
		if _, ok := l["trace_id"]; ok {
			t.Errorf("log line %v has a trace_id with tracing off", l)
		}
		if _, ok := l["span_id"]; ok {
			t.Errorf("log line %v has a span_id with tracing off", l)
		}
	}
}

// The OTEL_ variables that switch tracing on and off.
func TestParseEnvTracing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     map[string]string
		on      bool
		name    string
		errName string // the variable the error names; "" = no error
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "shop"}, name: "shop"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, errName: "OTEL_TRACES_EXPORTER"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, errName: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, errName: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{env: map[string]string{"OTEL_SDK_DISABLED": "maybe"}, errName: "OTEL_SDK_DISABLED"},
	} {
		cfg, err := app.ParseEnv(func(k string) string { return c.env[k] })
		switch {
		case c.errName != "":
			if err == nil || !strings.Contains(err.Error(), c.errName) {
				t.Errorf("ParseEnv(%v) error = %v; want one naming %s", c.env, err, c.errName)
			}
		case err != nil:
			t.Errorf("ParseEnv(%v) = %v", c.env, err)
		case cfg.Telemetry.Tracing != c.on || cfg.Telemetry.ServiceName != c.name:
			t.Errorf("ParseEnv(%v): Tracing %v, ServiceName %q; want %v %q", c.env, cfg.Telemetry.Tracing, cfg.Telemetry.ServiceName, c.on, c.name)
		}
	}
}

// otlpReceiver is an OTLP/HTTP endpoint that keeps the trace export
// requests it gets.
type otlpReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*coltrace.ExportTraceServiceRequest
	bad  []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var m coltrace.ExportTraceServiceRequest
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &m) != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.reqs = append(r.reqs, &m)
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// spans returns the names of the exported spans and the service.name of
// their resources.
func (r *otlpReceiver) spans() (names, services []string, bad []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.reqs {
		for _, rs := range m.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	return names, services, r.bad
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, the server exports its spans over
// OTLP/HTTP protobuf to that endpoint, flushed when it closes, with
// OTEL_SERVICE_NAME as the service.name; with the same exporter variables
// in the process but tracing off in the configuration, nothing is sent.
// (Not parallel: the exporter reads the process's environment.)
func TestOTLPExport(t *testing.T) {
	for _, on := range []bool{true, false} {
		recv := newOTLPReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
		env := map[string]string{"OTEL_SERVICE_NAME": "stock-export-test"}
		if on {
			env["OTEL_EXPORTER_OTLP_ENDPOINT"] = recv.URL
		}
		parsed, err := app.ParseEnv(func(k string) string { return env[k] })
		if err != nil || parsed.Telemetry.Tracing != on {
			t.Fatalf("ParseEnv(%v) = Tracing %v, %v; want %v", env, parsed.Telemetry.Tracing, err, on)
		}
		cfg := apptest.Config(apptest.Database(t))
		cfg.Telemetry.Tracing, cfg.Telemetry.ServiceName = parsed.Telemetry.Tracing, parsed.Telemetry.ServiceName
		srv := apptest.Start(t, cfg)
		setStock(t, srv, "SKU-X", 1)
		if st := order(t, srv, "buyer-1", "key-1", "SKU-X", 1, ""); st != http.StatusCreated {
			t.Fatalf("POST order = %d; want 201", st)
		}
		srv.Close() // flushes the batch span processor
		names, services, bad := recv.spans()
		if len(bad) > 0 {
			t.Errorf("tracing %v: requests the receiver could not read: %v", on, bad)
		}
		if !on {
			if len(names) > 0 {
				t.Errorf("tracing off: %d spans exported (%v); want none", len(names), names)
			}
			continue
		}
		for _, want := range []string{"PUT /v1/admin/stock/:sku", "POST /v1/orders", "stock.place", "stock.batch", "stock.lock", "stock.transaction"} {
			found := false
			for _, n := range names {
				found = found || n == want
			}
			if !found {
				t.Errorf("exported spans %v have no %q", names, want)
			}
		}
		for _, s := range services {
			if s != "stock-export-test" {
				t.Errorf("service.name = %q; want stock-export-test", s)
			}
		}
		if len(services) == 0 {
			t.Errorf("no service.name in the exported resources")
		}
	}
}
