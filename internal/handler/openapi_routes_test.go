package handler_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/metrics"
)

func docHandler(t *testing.T) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	feed, _ := fakeFeed() // the feed routes are served only with a feed
	h, err := handler.New(handler.Config{AdminToken: adminToken, ServeMetrics: true, CORSOrigins: []string{"https://shop.example"}, Events: feed},
		nil, nil, metrics.New(reg), reg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The document lists every route the handler registers (HEAD as the GET of
// its path; OPTIONS, CORS's preflights, in its introduction and unlisted
// answers), and nothing else.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	t.Parallel()
	engine, ok := docHandler(t).(*gin.Engine)
	if !ok {
		t.Fatalf("handler.New returned %T; want *gin.Engine", docHandler(t))
	}
	param := regexp.MustCompile(`:([A-Za-z]+)`)
	var served []string
	for _, r := range engine.Routes() {
		m := r.Method
		if m == http.MethodHead || m == http.MethodOptions {
			continue
		}
		served = append(served, m+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	heads := map[string]bool{}
	for _, r := range engine.Routes() {
		if r.Method == http.MethodHead {
			heads[param.ReplaceAllString(r.Path, "{$1}")] = true
		}
	}
	doc, err := openapi3.NewLoader().LoadFromData(handler.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
			if method == http.MethodGet && !heads[path] {
				t.Errorf("GET %s has no HEAD route; the document says every GET route answers HEAD", path)
			}
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	if !slices.Equal(served, documented) {
		t.Fatalf("routes served:\n%s\nroutes documented:\n%s", strings.Join(served, "\n"), strings.Join(documented, "\n"))
	}
}

// GET /openapi.yaml serves the embedded document, and /openapi.json the same
// document in JSON; both answers match the document.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	h := checkSpec(t, docHandler(t))
	get := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, path, nil))
		return rec
	}
	y := get("GET", "/openapi.yaml")
	if y.Code != 200 || y.Header().Get("Content-Type") != "application/yaml" || !bytes.Equal(y.Body.Bytes(), handler.OpenAPI()) {
		t.Fatalf("GET /openapi.yaml = %d %q, %d bytes; want 200 application/yaml, the %d bytes of handler.OpenAPI()",
			y.Code, y.Header().Get("Content-Type"), y.Body.Len(), len(handler.OpenAPI()))
	}
	j := get("GET", "/openapi.json")
	if j.Code != 200 || j.Header().Get("Content-Type") != "application/json" || !json.Valid(j.Body.Bytes()) {
		t.Fatalf("GET /openapi.json = %d %q %.200s; want 200 application/json, valid JSON", j.Code, j.Header().Get("Content-Type"), j.Body)
	}
	fromYAML, err := openapi3.NewLoader().LoadFromData(y.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := openapi3.NewLoader().LoadFromData(j.Body.Bytes())
	if err != nil {
		t.Fatalf("load /openapi.json: %v", err)
	}
	a, _ := json.Marshal(fromYAML)
	b, _ := json.Marshal(fromJSON)
	if !bytes.Equal(a, b) {
		t.Fatalf("/openapi.json is not /openapi.yaml's document:\n%.500s\n%.500s", b, a)
	}
	if r := get("HEAD", "/openapi.json"); r.Code != 200 {
		t.Fatalf("HEAD /openapi.json = %d; want 200", r.Code)
	}
}
