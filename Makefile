GO ?= go
export CGO_ENABLED ?= 1

.PHONY: help test vet lint unit fuzz run build bench chaos demo k6-check

## help: list the targets (from their ## comments)
help:
	@awk '/^## [a-z0-9-]+:/ { sub(/^## /, ""); print; next } /^## / { sub(/^## /, "    "); print }' $(MAKEFILE_LIST)

## test: vet, lint, the whole suite with the race detector, the compose file and k6 type checks (what CI runs)
test: vet lint unit fuzz compose-check k6-check

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

## lint: golangci-lint (the version pinned here, built by `go run`) with .golangci.yml, on this module, bench/ and loadtest/composecheck/
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT = $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
lint:
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	cd loadtest/composecheck && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

## fuzz: each fuzz target for FUZZTIME (request decoding, key and SKU validators, POST /v1/orders, the whole router)
FUZZTIME ?= 5s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeOrder$$' -fuzztime $(FUZZTIME) ./internal/handler
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

## bench: lock benchmarks side by side with bsm/redislock and redsync (separate module)
bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m .

## chaos: the whole fault matrix and the bots scenario (loadtest/chaos, STOCK_CHAOS=full): prints the results table and
## writes it to loadtest/report/chaos.md; `make test` runs its short subset
chaos:
	@mkdir -p loadtest/report && rm -f loadtest/report/chaos.md
	STOCK_CHAOS=full STOCK_CHAOS_REPORT=$(CURDIR)/loadtest/report/chaos.md \
		$(GO) test -race -count=1 -timeout 20m -run '^(TestChaos|TestBots)$$' ./loadtest/chaos; \
		status=$$?; cat loadtest/report/chaos.md 2>/dev/null; exit $$status

## k6-check: type-check the k6 scripts against @types/k6 (no k6 needed)
## compose-check: validate docker-compose.yml, loadtest/nginx.conf and the Dockerfile without Docker
.PHONY: k6-check compose-check
k6-check:
	cd loadtest/k6 && npm ci --no-audit --no-fund && npm run check

compose-check:
	cd loadtest/composecheck && $(GO) test -count=1 ./...

## demo: the ceiling (the same three instances' /healthz, GET /v1/stock and sold-out rates),
## then every strategy on three local instances: the zero-oversell proof (sell-out) and a
## throughput run that does not sell out; prints the comparison, writes loadtest/report/
## demo-throughput: the ceiling and the throughput run only
## profile: the ceiling and a longer lock+version throughput run with a CPU profile of one
## instance and the machine's CPU by process; writes docs/profile.md (and docs/profile.pb.gz)
.PHONY: demo-throughput profile
# all: every strategy of the service's one table (internal/service/strategy.go)
DEMO_STRATEGIES ?= all
DEMO_STOCK ?= 1000
DEMO_BUYERS ?= 5000
DEMO_CONCURRENCY ?= 200
DEMO_QUANTITY ?= 1
DEMO_TP_STOCK ?= 1000000
DEMO_TP_BUYERS ?= 20000
DEMO_TP_CONCURRENCY ?= $(DEMO_CONCURRENCY)
DEMO_FLAGS ?=
demo_args = -bin bin/stock -strategies '$(DEMO_STRATEGIES)' -stock $(DEMO_STOCK) -buyers $(DEMO_BUYERS) \
	-concurrency $(DEMO_CONCURRENCY) -quantity $(DEMO_QUANTITY) -tp-stock $(DEMO_TP_STOCK) \
	-tp-buyers $(DEMO_TP_BUYERS) -tp-concurrency $(DEMO_TP_CONCURRENCY) -out loadtest/report $(DEMO_FLAGS)
demo: build
	$(GO) run ./loadtest/demo $(demo_args) -phases ceiling,sellout,throughput
demo-throughput: build
	$(GO) run ./loadtest/demo $(demo_args) -phases ceiling,throughput
profile: build
	$(GO) run ./loadtest/demo -bin bin/stock -strategies lock+version -tp-buyers 60000 \
		-tp-concurrency $(DEMO_TP_CONCURRENCY) -out loadtest/report -phases ceiling,throughput -profile docs/profile.md $(DEMO_FLAGS)
