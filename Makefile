GO ?= go
export CGO_ENABLED ?= 1

.PHONY: help test vet lint unit fuzz run build bench chaos demo k6-check flake-check

## help: list the targets (from their ## comments)
help:
	@awk '/^## [a-z0-9-]+:/ { sub(/^## /, ""); print; next } /^## / { sub(/^## /, "    "); print }' $(MAKEFILE_LIST)

## test: vet, lint, the whole suite with the race detector, the compose file and k6 type checks (what CI runs)
test: vet lint unit fuzz compose-check k6-check

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

## flake-check: the whole suite FLAKE_ROUNDS times (default 5) with the race detector while CPU burners keep every
## core busy; reports each test that failed in any round, with its failure; writes docs/results/flake-check.md
FLAKE_ROUNDS ?= 5
flake-check:
	@mkdir -p docs/results
	$(GO) run ./loadtest/flakecheck -n $(FLAKE_ROUNDS) -report docs/results/flake-check.md ./...

## lint: golangci-lint (the version pinned here, built by `go run`) with .golangci.yml, on this module, bench/ and loadtest/composecheck/
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT = $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
lint:
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	cd loadtest/composecheck && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

## fuzz: each fuzz target for FUZZTIME (request decoding, its member-name scanner, key and SKU validators, POST /v1/orders, the whole router)
# A count of inputs, not a duration: with a duration, Go 1.26's fuzz
# coordinator can fail a run that found nothing with "context deadline
# exceeded" at the deadline (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeOrder$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzScanNames$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzValidKey$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceOrder$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzRouter$$' -fuzztime $(FUZZTIME) ./internal/handler

build:
	$(GO) build -o bin/stock ./cmd/stock

## run: migrate and serve against the local MySQL and Redis
# A development secret for the buyers' tokens unless STOCK_JWT_SECRET is set;
# `./bin/stock token --buyer u-1` mints one with it.
export STOCK_JWT_SECRET ?= dev-jwt-secret-change-me-0123456789
run: build
	./bin/stock migrate
	./bin/stock serve

## bench: lock benchmarks side by side with bsm/redislock and redsync (separate module), then the order batch
## (internal/repo: gorm, plain database/sql and the multi-statement; the cost per order by batch size); writes
## docs/results/bench.md
bench:
	@mkdir -p docs/results
	{ (cd bench && $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m .) && \
		$(GO) test -run '^$$' -bench Batch -benchmem -count=1 -timeout 10m ./internal/repo; } > docs/results/bench.txt.new; \
		status=$$?; cat docs/results/bench.txt.new; [ $$status -eq 0 ] && $(GO) run ./loadtest/results -title "Lock benchmarks beside bsm/redislock and redsync; the order batch" -target bench \
		< docs/results/bench.txt.new > docs/results/bench.md; rm -f docs/results/bench.txt.new; exit $$status

## chaos: the whole fault matrix and the bots scenario (loadtest/chaos, STOCK_CHAOS=full): prints the results table and
## writes it to docs/results/chaos.md; `make test` runs its short subset
chaos:
	@mkdir -p docs/results && rm -f docs/results/chaos.md.new
	@# the flood row's connections wait in the accept queue past STOCK_MAX_CONNS: room for them (as root)
	-@sysctl -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 >/dev/null 2>&1
	STOCK_CHAOS=full STOCK_CHAOS_REPORT=$(CURDIR)/docs/results/chaos.md.new \
		$(GO) test -race -count=1 -timeout 20m -run '^(TestChaos|TestBots)$$' ./loadtest/chaos; \
		status=$$?; if [ -s docs/results/chaos.md.new ]; then mv docs/results/chaos.md.new docs/results/chaos.md; cat docs/results/chaos.md; fi; exit $$status

## k6-check: type-check the k6 scripts against @types/k6 (no k6 needed)
## compose-check: validate docker-compose.yml, loadtest/nginx.conf, the Dockerfile, deploy/ (Prometheus, Grafana
## dashboard against a live /metrics, kustomize build of deploy/k8s) without Docker or a cluster
.PHONY: k6-check compose-check
k6-check:
	cd loadtest/k6 && npm ci --no-audit --no-fund && npm run check

compose-check:
	cd loadtest/composecheck && $(GO) test -count=1 ./...

## demo: the ceiling (the same three instances' /healthz, GET /v1/stock and sold-out rates),
## then every strategy on three local instances: the zero-oversell proof (sell-out) and a
## throughput run that does not sell out; then the gates phase (each STOCK_LOCK_BACKEND, DEMO_BACKENDS);
## prints the comparison, writes loadtest/report/
## demo-throughput: the ceiling and the throughput run only
## demo-gates: the gates phase alone: each STOCK_LOCK_BACKEND (DEMO_BACKENDS) with the backstop on, then
## without it under a pause; writes docs/results/gates.md
## demo-wrk: /healthz and lock+version orders on one hot SKU measured with wrk (apt-get install -y wrk), a load
## generator far cheaper per request than the Go driver; checks the sale in MySQL; writes docs/results/wrk.md
## profile: the ceiling and a longer lock+version throughput run with a CPU profile of one
## instance and the machine's CPU by process; writes docs/profile.md (and docs/profile.pb.gz)
.PHONY: demo-throughput demo-gates demo-wrk profile
# all: every strategy of the service's one table (internal/service/strategy.go)
DEMO_STRATEGIES ?= all
DEMO_STOCK ?= 1000
DEMO_BUYERS ?= 5000
DEMO_CONCURRENCY ?= 200
DEMO_QUANTITY ?= 1
DEMO_TP_STOCK ?= 1000000
DEMO_TP_BUYERS ?= 20000
DEMO_TP_CONCURRENCY ?= $(DEMO_CONCURRENCY)
DEMO_BACKENDS ?= all
DEMO_FLAGS ?=
demo_args = -bin bin/stock -strategies '$(DEMO_STRATEGIES)' -stock $(DEMO_STOCK) -buyers $(DEMO_BUYERS) \
	-concurrency $(DEMO_CONCURRENCY) -quantity $(DEMO_QUANTITY) -tp-stock $(DEMO_TP_STOCK) \
	-tp-buyers $(DEMO_TP_BUYERS) -tp-concurrency $(DEMO_TP_CONCURRENCY) -backends '$(DEMO_BACKENDS)' -out loadtest/report $(DEMO_FLAGS)
demo: build
	$(GO) run ./loadtest/demo $(demo_args) -phases ceiling,sellout,throughput,gates -results docs/results/demo.md -gates-doc docs/results/gates.md -target demo
demo-throughput: build
	$(GO) run ./loadtest/demo $(demo_args) -phases ceiling,throughput -results docs/results/demo-throughput.md -target demo-throughput
demo-gates: build
	$(GO) run ./loadtest/demo $(demo_args) -phases gates -gates-doc docs/results/gates.md -target demo-gates
demo-wrk: build
	$(GO) run ./loadtest/demo -bin bin/stock -strategies lock+version -phases wrk -out loadtest/report -wrk-doc docs/results/wrk.md -target demo-wrk $(DEMO_FLAGS)
profile: build
	$(GO) run ./loadtest/demo -bin bin/stock -strategies lock+version -tp-buyers 150000 \
		-tp-concurrency $(DEMO_TP_CONCURRENCY) -out loadtest/report -phases ceiling,throughput -profile docs/profile.md $(DEMO_FLAGS)
