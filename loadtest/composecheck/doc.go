// Package composecheck checks docker-compose.yml, loadtest/nginx.conf, the
// Dockerfile and .dockerignore of the stock service without Docker: it loads
// the compose file with the compose-spec loader (schema validation and
// interpolation included) and asserts the wiring the load test relies on.
//
// It is a module of its own so the service's module does not carry the
// compose loader's dependencies. Run it with
//
//	cd loadtest/composecheck && go test ./...
package composecheck
