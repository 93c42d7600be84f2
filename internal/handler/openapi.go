package handler

import (
	_ "embed"
	"fmt"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/goccy/go-yaml"
)

// openapiYAML is the OpenAPI 3.1 document of the API. Tests check every
// request and answer of the full-stack tests against it, so it cannot drift
// from the code.
//
//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPI returns the OpenAPI 3.1 document of the API, in YAML: what GET
// /openapi.yaml serves (GET /openapi.json serves it in JSON).
func OpenAPI() []byte { return openapiYAML }

// openapiJSON is the document in JSON, converted once.
var openapiJSON = sync.OnceValues(func() ([]byte, error) {
	b, err := yaml.YAMLToJSON(openapiYAML)
	if err != nil {
		return nil, fmt.Errorf("handler: openapi.yaml to JSON: %w", err)
	}
	return b, nil
})

// serveDocument answers with a fixed body of the content type.
func serveDocument(contentType string, body []byte) gin.HandlerFunc {
	return func(c *gin.Context) { c.Data(http.StatusOK, contentType, body) }
}
