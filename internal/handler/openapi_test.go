package handler_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/seckill/stock/internal/handler"
)

// This file checks every exchange with a handler against an OpenAPI
// document. It uses nothing of the other tests here: specCheck takes the
// document and reports mismatches through a function, and checkSpec binds it
// to the handler's document and a test.

// checkSpec wraps h so that each request it serves, and each answer, is
// checked against the handler's OpenAPI document; a mismatch fails t.
func checkSpec(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	s, err := handlerSpec()
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return s.Wrap(h, func(err error) { t.Errorf("openapi: %v", err) })
}

// handlerSpec is the handler's document, loaded and validated once.
var handlerSpec = sync.OnceValues(func() (*specCheck, error) { return newSpecCheck(handler.OpenAPI()) })

// specCheck checks HTTP exchanges against an OpenAPI 3.1 document. It is
// safe for concurrent use.
//
// An exchange matches when:
//   - its route (method and path) is in the document, and the answer's status
//     is one the operation lists, with the headers, media type and body that
//     it describes (required headers present, bodies valid against their
//     schemas). HEAD is checked as the GET of the same path, without a body.
//   - a request the document refuses (a parameter, a body or credentials
//     that it does not allow) is not answered 1xx-3xx.
//   - a route that is not in the document is answered like the document's
//     NotFound response (an unknown path) or MethodNotAllowed (a known path
//     with another method; for OPTIONS, a CORS preflight's Preflight or
//     CORSRefused too): an undocumented route that answers anything else is
//     a mismatch.
type specCheck struct {
	doc    *openapi3.T
	router routers.Router
}

func newSpecCheck(spec []byte) (*specCheck, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the document is not valid: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the document is OpenAPI %s; want 3.1", doc.OpenAPI)
	}
	for _, name := range []string{"NotFound", "MethodNotAllowed", "Preflight", "CORSRefused"} {
		if doc.Components == nil || doc.Components.Responses[name] == nil {
			return nil, fmt.Errorf("the document has no %s response, for the routes it does not list", name)
		}
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	return &specCheck{doc: doc, router: router}, nil
}

// exchange is one request, with the body the server read of it, and the
// server's answer.
type exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Check returns the mismatches of ex with the document, or nil.
func (s *specCheck) Check(ex exchange) error {
	ctx := context.Background()
	req := ex.Request.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(ex.RequestBody))
	head := req.Method == http.MethodHead
	if head {
		req.Method = http.MethodGet
	}
	what := ex.Request.Method + " " + ex.Request.URL.RequestURI()
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		answers, uerr := unlisted(req.Method, err)
		if uerr != nil {
			return fmt.Errorf("%s: %w", what, uerr)
		}
		name, ok := answers[ex.Status]
		if !ok {
			return fmt.Errorf("%s is not in the document, and was answered %d; want one of %v", what, ex.Status, answers)
		}
		route = &routers.Route{Spec: s.doc, Path: req.URL.Path, Method: req.Method, Operation: &openapi3.Operation{
			Responses: openapi3.NewResponses(openapi3.WithStatus(ex.Status, s.doc.Components.Responses[name]))}}
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		ExcludeResponseBody:   head,
		SkipSettingDefaults:   true,
		MultiError:            true,
		AuthenticationFunc:    bearerPresent,
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err == nil {
		if rerr := openapi3filter.ValidateRequest(ctx, in); rerr != nil && ex.Status < 400 {
			return fmt.Errorf("%s: the document refuses the request, but it was answered %d: %w", what, ex.Status, rerr)
		}
	}
	body, err := decoded(ex.Header, ex.Body)
	if err != nil {
		return fmt.Errorf("%s answered %d: %w", what, ex.Status, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: ex.Status, Header: ex.Header, Options: opts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s answered %d %s: %w", what, ex.Status, clip(ex.Body), err)
	}
	return nil
}

// unlisted returns the answers, by status, that a request the document
// lists no operation for may get (err is the router's): on an unknown path,
// NotFound; on a known path with another method, MethodNotAllowed, and for
// OPTIONS also a CORS preflight's Preflight or CORSRefused.
func unlisted(method string, err error) (map[int]string, error) {
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		return map[int]string{http.StatusNotFound: "NotFound"}, nil
	case !errors.Is(err, routers.ErrMethodNotAllowed):
		return nil, err
	case method == http.MethodOptions:
		return map[int]string{http.StatusMethodNotAllowed: "MethodNotAllowed", http.StatusNoContent: "Preflight",
			http.StatusForbidden: "CORSRefused"}, nil
	}
	return map[int]string{http.StatusMethodNotAllowed: "MethodNotAllowed"}, nil
}

// bearerPresent holds an http bearer security scheme met when the request
// has bearer credentials: whether they are good is the server's to say.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	ss := in.SecurityScheme
	if ss == nil || ss.Type != "http" || !strings.EqualFold(ss.Scheme, "bearer") {
		return fmt.Errorf("security scheme %q is not checked here", in.SecuritySchemeName)
	}
	scheme, tok, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer credentials")
	}
	return nil
}

// decoded is body without its Content-Encoding (gzip, which /metrics may
// use): the document describes the representation, not its transfer.
func decoded(h http.Header, body []byte) ([]byte, error) {
	switch enc := h.Get("Content-Encoding"); enc {
	case "", "identity":
		return body, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		return io.ReadAll(zr)
	default:
		return nil, fmt.Errorf("content encoding %q is not checked here", enc)
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// Wrap returns h with every exchange checked: mismatch is called with each
// mismatch, after the answer was written. A request's body is checked as far
// as h read it.
func (s *specCheck) Wrap(h http.Handler, mismatch func(error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var read bytes.Buffer
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = teeBody{Reader: io.TeeReader(r.Body, &read), Closer: r.Body}
		}
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == 0 { // nothing written: net/http answers 200
			rec.status, rec.header = http.StatusOK, w.Header().Clone()
		}
		if err := s.Check(exchange{Request: r, RequestBody: read.Bytes(), Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}); err != nil {
			mismatch(err)
		}
	})
}

type teeBody struct {
	io.Reader
	io.Closer
}

// recorder passes an answer through and keeps its status, headers and body.
type recorder struct {
	http.ResponseWriter
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status, r.header = code, r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// The check catches drift: each answer below breaks the document in one way
// and is reported; the good ones next to them are not.
func TestSpecCheckCatchesDrift(t *testing.T) {
	t.Parallel()
	s, err := handlerSpec()
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://stock.example/problems/"
	stock := `{"sku":"S","available":1,"reserved":0,"sold":0,"version":1,"per_buyer_limit":0,"payment_window_seconds":0,"sale_starts_at":null,"sale_ends_at":null,"max_unpaid_per_buyer":null}`
	order := `{"id":7,"buyer":"b","idempotency_key":"k","sku":"S","quantity":1,"status":"confirmed","created_at":"2026-01-02T03:04:05Z"}`
	problem := func(kind string, status int, extra string) string {
		return fmt.Sprintf(`{"type":%q,"title":"t","status":%d,"instance":"/x"%s}`, base+kind, status, extra)
	}
	js, pj := "application/json; charset=utf-8", "application/problem+json"
	buyer := "Bearer some.jwt.token"
	placed := []string{"Location", "/v1/orders/7"}
	for _, c := range []struct {
		name               string
		method, path, auth string
		reqHeader          []string
		reqBody            string
		status             int
		ctype              string
		header             []string
		body               string
		drift              bool
	}{
		{"stock", "GET", "/v1/stock/S", "", nil, "", 200, js, nil, stock, false},
		{"stock, HEAD", "HEAD", "/v1/stock/S", "", nil, "", 200, js, nil, "", false},
		{"stock without a field", "GET", "/v1/stock/S", "", nil, "", 200, js, nil, `{"sku":"S","available":1,"sold":0,"per_buyer_limit":0}`, true},
		{"stock with a field the document does not have", "GET", "/v1/stock/S", "", nil, "", 200, js, nil, stock[:len(stock)-1] + `,"price":3}`, true},
		{"stock with a field of another type", "GET", "/v1/stock/S", "", nil, "", 200, js, nil, `{"sku":"S","available":"1","sold":0,"version":1,"per_buyer_limit":0}`, true},
		{"stock in another media type", "GET", "/v1/stock/S", "", nil, "", 200, "text/plain", nil, stock, true},
		{"a status the operation does not list", "GET", "/v1/stock/S", "", nil, "", 418, pj, nil, problem("teapot", 418, ""), true},
		{"HEAD with a status GET does not list", "HEAD", "/v1/stock/S", "", nil, "", 418, pj, nil, "", true},
		{"unknown SKU", "GET", "/v1/stock/S", "", nil, "", 404, pj, nil, problem("unknown-sku", 404, ""), false},
		{"a problem kind the answer does not have", "GET", "/v1/stock/S", "", nil, "", 404, pj, nil, problem("order-not-found", 404, ""), true},
		{"a problem whose status is not the answer's", "GET", "/v1/stock/S", "", nil, "", 404, pj, nil, problem("unknown-sku", 400, ""), true},
		{"a problem as application/json", "GET", "/v1/stock/S", "", nil, "", 404, js, nil, problem("unknown-sku", 404, ""), true},
		{"no X-Request-Id", "GET", "/v1/stock/S", "", nil, "", 200, js, []string{"X-Request-Id", ""}, stock, true},
		{"no X-Content-Type-Options", "GET", "/v1/stock/S", "", nil, "", 200, js, []string{"X-Content-Type-Options", ""}, stock, true},
		{"X-Content-Type-Options not nosniff", "GET", "/v1/stock/S", "", nil, "", 200, js, []string{"X-Content-Type-Options", "sniff"}, stock, true},
		{"an order without Cache-Control", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 201, js, append([]string{"Cache-Control", ""}, placed...), order, true},
		{"an order cacheable", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 201, js, append([]string{"Cache-Control", "max-age=60"}, placed...), order, true},
		{"a buyer's 401 without Cache-Control", "POST", "/v1/orders", "", nil, "", 401, pj, []string{"WWW-Authenticate", `Bearer realm="stock", error="invalid_token"`, "Cache-Control", ""}, problem("invalid-token", 401, ""), true},
		{"an undocumented route that answers", "GET", "/v1/coupons", "", nil, "", 200, js, nil, `{}`, true},
		{"an undocumented route: not found", "GET", "/v1/coupons", "", nil, "", 404, pj, nil, problem("not-found", 404, ""), false},
		{"an undocumented method that answers", "DELETE", "/v1/orders", buyer, nil, "", 204, "", nil, "", true},
		{"an undocumented method: not allowed", "DELETE", "/v1/orders", buyer, nil, "", 405, pj, nil, problem("method-not-allowed", 405, ""), false},
		{"order placed", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 201, js, placed, order, false},
		{"order placed without Location", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 201, js, nil, order, true},
		{"order placed without an Idempotency-Key", "POST", "/v1/orders", buyer, nil, `{"sku":"S","quantity":1}`, 201, js, placed, order, true},
		{"order placed without credentials", "POST", "/v1/orders", "", []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 201, js, placed, order, true},
		{"order placed for a body the document refuses", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":0}`, 201, js, placed, order, true},
		{"a refused body answered 400", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":0}`, 400, pj, nil, problem("invalid-request", 400, `,"detail":"d"`), false},
		{"401 with WWW-Authenticate", "POST", "/v1/orders", "", nil, "", 401, pj, []string{"WWW-Authenticate", `Bearer realm="stock", error="invalid_token"`}, problem("invalid-token", 401, ""), false},
		{"401 without WWW-Authenticate", "POST", "/v1/orders", "", nil, "", 401, pj, nil, problem("invalid-token", 401, ""), true},
		{"limit exceeded", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("limit-exceeded", 409, `,"detail":"d","limit":3,"remaining":0`), false},
		{"limit exceeded without remaining", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("limit-exceeded", 409, `,"detail":"d","limit":3`), true},
		{"unpaid limit", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("unpaid-limit", 409, `,"detail":"d","max_unpaid_per_buyer":100,"unpaid":100`), false},
		{"unpaid limit without unpaid", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("unpaid-limit", 409, `,"detail":"d","max_unpaid_per_buyer":100`), true},
		{"unpaid limit with a limit's members", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("unpaid-limit", 409, `,"detail":"d","max_unpaid_per_buyer":100,"unpaid":100,"limit":3`), true},
		{"stock without its unpaid cap", "GET", "/v1/stock/S", "", nil, "", 200, js, nil, strings.Replace(stock, `,"max_unpaid_per_buyer":null`, "", 1), true},
		{"sold out with a limit", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil, problem("sold-out", 409, `,"limit":3,"remaining":0`), true},
		{"busy without Retry-After", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 429, pj, nil, problem("busy", 429, ""), true},
		{"busy", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 429, pj, []string{"Retry-After", "1"}, problem("busy", 429, ""), false},
		{"sale not started", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, []string{"Retry-After", "5"},
			problem("sale-not-started", 409, `,"detail":"d","starts_at":"2026-12-24T20:00:00Z"`), false},
		{"sale not started without its start", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, []string{"Retry-After", "5"},
			problem("sale-not-started", 409, `,"detail":"d"`), true},
		{"sale ended with a start", "POST", "/v1/orders", buyer, []string{"Idempotency-Key", "k"}, `{"sku":"S","quantity":1}`, 409, pj, nil,
			problem("sale-ended", 409, `,"starts_at":"2026-12-24T20:00:00Z"`), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("X-Request-Id", "r1")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				if strings.HasPrefix(c.path, "/v1/orders") {
					w.Header().Set("Cache-Control", "no-store")
				}
				if c.ctype != "" {
					w.Header().Set("Content-Type", c.ctype)
				}
				for i := 0; i+1 < len(c.header); i += 2 {
					w.Header().Set(c.header[i], c.header[i+1])
					if c.header[i+1] == "" {
						w.Header().Del(c.header[i])
					}
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			})
			var got []error
			h := s.Wrap(fake, func(err error) { got = append(got, err) })
			req := httptest.NewRequestWithContext(t.Context(), c.method, c.path, strings.NewReader(c.reqBody))
			if c.reqBody != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			for i := 0; i+1 < len(c.reqHeader); i += 2 {
				req.Header.Set(c.reqHeader[i], c.reqHeader[i+1])
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if c.drift && len(got) == 0 {
				t.Fatalf("%s %s answered %d %s %s: no mismatch reported; want one", c.method, c.path, c.status, c.ctype, c.body)
			}
			if c.drift {
				t.Logf("reported: %v", got[0])
			}
			if !c.drift && len(got) > 0 {
				t.Fatalf("%s %s answered %d %s %s: mismatch %v; want none", c.method, c.path, c.status, c.ctype, c.body, got)
			}
		})
	}
}
