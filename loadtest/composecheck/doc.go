// Package composecheck checks the deployment files of the stock service
// without Docker or a cluster: docker-compose.yml (loaded with the
// compose-spec loader, schema validation and interpolation included),
// loadtest/nginx.conf, the Dockerfile and .dockerignore; the observe
// profile's Prometheus configuration and alert rules (with Prometheus's own
// loaders), the Grafana dashboard and provisioning under deploy/, whose
// metric selectors are checked against a live instance's /metrics; and the
// Kubernetes manifests under deploy/k8s (built with kustomize and decoded
// strictly into the Kubernetes API types).
//
// It is a module of its own so the service's module does not carry the
// compose loader's, Prometheus's and Kubernetes' dependencies. Run it with
//
//	cd loadtest/composecheck && go test ./...
//
// (-short skips the live /metrics check, which builds ./cmd/stock and needs
// MariaDB on 127.0.0.1:3306 and Redis on 127.0.0.1:6379).
package composecheck
