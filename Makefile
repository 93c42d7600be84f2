GO ?= go
export CGO_ENABLED ?= 1
# A pipeline fails when any of its commands does (bench's tee).
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: help test unit vet lint fuzz flake-check build run fleet up token admin-token k8s-secrets bench chaos api-check k6-check compose-check demo-outbox \
	demo demo-throughput demo-lifecycle demo-gates demo-wrk demo-open profile

help: ## list the targets
	@awk -F ':.*## ' '/^[a-z0-9-]+:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

test: vet lint api-check unit fuzz compose-check k6-check ## what CI runs: vet, lint, the API document's lint, the suite with -race, fuzz, compose and k6 checks

unit: ## the whole suite with the race detector (the short fault matrix included)
	$(GO) test -race -count=1 -timeout 15m ./...

vet: ## go vet
	$(GO) vet ./...

FLAKE_ROUNDS ?= 5
flake-check: ## the suite FLAKE_ROUNDS times under CPU burners; lists every test that failed once; docs/results/flake-check.md
	@mkdir -p docs/results
	$(GO) run ./cmd/flakecheck -n $(FLAKE_ROUNDS) -report docs/results/flake-check.md ./...

GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT = $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
lint: ## golangci-lint (pinned, built by go run) on this module, bench/ and loadtest/composecheck/
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...
	cd loadtest/composecheck && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

# A count of inputs, not a duration: with a duration, Go 1.26's fuzz
# coordinator can fail a run that found nothing with "context deadline
# exceeded" at the deadline (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 10000x
FUZZ_TARGETS = FuzzDecodeOrder FuzzScanNames FuzzValidKey FuzzPlaceOrder FuzzRouter
fuzz: ## each fuzz target of internal/handler for FUZZTIME inputs
	@for f in $(FUZZ_TARGETS); do \
		echo "fuzz $$f"; \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) ./internal/handler || exit 1; \
	done

build: ## bin/stock
	$(GO) build -o bin/stock ./cmd/stock

# The development secrets: .env (git-ignored), written once from .env.example
# with each empty secret filled by `openssl rand -hex 32`; docker compose
# reads it, and `make run` takes its tokens and JWT secret from it.
.env:
	@umask 077 && awk -v a="$$(openssl rand -hex 32)" -v p="$$(openssl rand -hex 32)" -v j="$$(openssl rand -hex 32)" \
		'/^STOCK_ADMIN_TOKEN=$$/ { $$0 = $$0 a } /^STOCK_PAYMENT_TOKEN=$$/ { $$0 = $$0 p } /^STOCK_JWT_SECRET=$$/ { $$0 = $$0 j } 1' \
		.env.example > $@.tmp && mv $@.tmp $@
	@echo "wrote $@ with fresh secrets (the admin token: make admin-token)" >&2

# The secrets of .env, each unless already set in the environment.
dev_secrets = set -a && eval "$$(sed -nE 's/^(STOCK_ADMIN_TOKEN|STOCK_PAYMENT_TOKEN|STOCK_JWT_SECRET)=(.+)$$/: "$${\1:=\2}"/p' .env)" && set +a

run: build .env ## migrate and serve on :8080 (STOCK_HTTP_ADDR) against the local MySQL and Redis, with the secrets of .env
	@$(dev_secrets) && ./bin/stock migrate && exec ./bin/stock serve

# Three instances on one machine: everything shared (MySQL, Redis, the
# secrets of .env and every other STOCK_ setting of the environment) but the
# listen address; the private listeners are dropped, as three would clash.
# In the foreground: the first to stop, or Ctrl-C, stops them all.
FLEET_PORTS ?= 8081 8082 8083
fleet: build .env ## three serve processes on 127.0.0.1:FLEET_PORTS (8081-8083), one MySQL and Redis, the secrets of .env; Ctrl-C stops all
	@$(dev_secrets) && ./bin/stock migrate && unset STOCK_METRICS_ADDR STOCK_PPROF_ADDR && pids= && \
		trap 'trap - INT TERM; kill -TERM $$pids 2>/dev/null; wait; exit 130' INT TERM && \
		for p in $(FLEET_PORTS); do STOCK_HTTP_ADDR=127.0.0.1:$$p ./bin/stock serve & pids="$$pids $$!"; done; \
		wait -n; status=$$?; kill -TERM $$pids 2>/dev/null; wait; exit $$status

up: .env ## docker compose up -d --build, with the secrets of .env
	docker compose up -d --build

# token and admin-token print nothing but the token (no build line), so
# $$(make token) is the token.
token: .env ## print a buyer's token for make run's and make fleet's servers: make token BUYER=u-1
	@$(GO) build -o bin/stock ./cmd/stock && $(dev_secrets) && ./bin/stock token --buyer $(or $(BUYER),u-1)

admin-token: .env ## print the admin token make run and make fleet serve with (STOCK_ADMIN_TOKEN, else .env's)
	@$(dev_secrets) && printf '%s\n' "$$STOCK_ADMIN_TOKEN"

# The k8s base's Secret: deploy/k8s/base/secrets.env (git-ignored), written
# once with random values.
deploy/k8s/base/secrets.env:
	@umask 077 && { echo "STOCK_MYSQL_DSN=stock:$$(openssl rand -hex 16)@tcp(mysql:3306)/stock?parseTime=true"; \
		for v in STOCK_JWT_SECRET STOCK_ADMIN_TOKEN STOCK_PAYMENT_TOKEN; do echo "$$v=$$(openssl rand -hex 32)"; done; } > $@.tmp && mv $@.tmp $@
	@echo "wrote $@ with fresh secrets; set its STOCK_MYSQL_DSN to your MySQL user's"

k8s-secrets: deploy/k8s/base/secrets.env ## write the k8s base's secrets.env once, then: kubectl apply -k deploy/k8s/base

BENCH_OUT = docs/results/bench.txt.new
bench: ## the lock beside bsm/redislock and redsync, then the order batch's writers; docs/results/bench.md
	@mkdir -p docs/results
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m . | tee ../$(BENCH_OUT)
	$(GO) test -run '^$$' -bench Batch -benchmem -count=1 -timeout 10m ./internal/repo | tee -a $(BENCH_OUT)
	$(GO) run ./cmd/results -title "Lock benchmarks beside bsm/redislock and redsync; the order batch" -target bench \
		< $(BENCH_OUT) > docs/results/bench.md
	rm -f $(BENCH_OUT)

chaos: ## the whole fault matrix, the bots scenario and the lock histories; docs/results/chaos.md, histories.md (make test runs a short subset)
	@mkdir -p docs/results && rm -f docs/results/chaos.md.new docs/results/histories.md.new
	@# the flood row's connections wait in the accept queue past STOCK_MAX_CONNS: room for them (as root)
	-@sysctl -w net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 >/dev/null 2>&1
	STOCK_CHAOS=full STOCK_CHAOS_REPORT=$(CURDIR)/docs/results/chaos.md.new STOCK_HISTORY_REPORT=$(CURDIR)/docs/results/histories.md.new \
		$(GO) test -race -count=1 -timeout 40m -run '^(TestChaos|TestBots|TestHistories)$$' ./loadtest/chaos; \
		status=$$?; for f in chaos histories; do if [ -s docs/results/$$f.md.new ]; then mv docs/results/$$f.md.new docs/results/$$f.md; cat docs/results/$$f.md; fi; done; exit $$status

api-check: ## lint the OpenAPI document with Spectral (spectral:oas and the OWASP API Security ruleset, pinned): no finding, warnings included
	cd tools/spectral && npm ci --no-audit --no-fund && npm run check

k6-check: ## type-check the k6 scripts against @types/k6 (no k6 needed)
	cd loadtest/k6 && npm ci --no-audit --no-fund && npm run check

compose-check: ## validate docker-compose.yml, nginx, the Dockerfile and deploy/ without Docker or a cluster
	cd loadtest/composecheck && $(GO) test -count=1 ./...

# DEMO_STRATEGIES all: every strategy of the service's one table (internal/service/strategy.go)
DEMO_STRATEGIES ?= all
DEMO_STOCK ?= 1000
DEMO_BUYERS ?= 5000
DEMO_CONCURRENCY ?= 200
DEMO_QUANTITY ?= 1
DEMO_TP_STOCK ?= 1000000
DEMO_TP_BUYERS ?= 20000
DEMO_TP_CONCURRENCY ?= $(DEMO_CONCURRENCY)
DEMO_GATES ?= all
DEMO_FLAGS ?=
demo_args = -bin bin/stock -strategies '$(DEMO_STRATEGIES)' -stock $(DEMO_STOCK) -buyers $(DEMO_BUYERS) \
	-concurrency $(DEMO_CONCURRENCY) -quantity $(DEMO_QUANTITY) -tp-stock $(DEMO_TP_STOCK) \
	-tp-buyers $(DEMO_TP_BUYERS) -tp-concurrency $(DEMO_TP_CONCURRENCY) -gates '$(DEMO_GATES)' -out loadtest/out $(DEMO_FLAGS)
demo: build ## the ceiling, then every strategy on three instances (sell-out proof, throughput, lifecycle), the gates, the outbox's cost, the opening second
	$(GO) run ./cmd/demo $(demo_args) -phases ceiling,sellout,throughput,lifecycle,gates,outbox,open -results docs/results/demo.md \
		-gates-doc docs/results/gates.md -outbox-doc docs/results/outbox.md -open-doc docs/results/opening.md -target demo

demo-outbox: build ## hot-SKU orders/s with the outbox's sinks (NATS, webhook) on against off, event lag, rows per order; docs/results/outbox.md
	$(GO) run ./cmd/demo -bin bin/stock -strategies lock+version -phases outbox -out loadtest/out -outbox-doc docs/results/outbox.md -target demo-outbox $(DEMO_FLAGS)

demo-open: build ## 20,000 buyers, connections open, order at a sale's start: one hot SKU, then 100 Zipf-picked; STOCK_PREWARM 0 and default; docs/results/opening.md
	$(GO) run ./cmd/demo -bin bin/stock -phases open -out loadtest/out -open-doc docs/results/opening.md -target demo-open $(DEMO_FLAGS)

demo-lifecycle: build ## every strategy under a payment window: reserve, pay, cancel, expire, checked from MySQL; docs/results/lifecycle.md
	$(GO) run ./cmd/demo $(demo_args) -phases lifecycle -results docs/results/lifecycle.md -target demo-lifecycle

demo-throughput: build ## the ceiling and the throughput run only
	$(GO) run ./cmd/demo $(demo_args) -phases ceiling,throughput -results docs/results/demo-throughput.md -target demo-throughput

demo-gates: build ## each STOCK_LOCK_BACKEND (DEMO_GATES) with the backstop, then without it under a pause; docs/results/gates.md
	$(GO) run ./cmd/demo $(demo_args) -phases gates -gates-doc docs/results/gates.md -target demo-gates

demo-wrk: build ## /healthz and lock+version orders on one hot SKU under wrk; checks the sale in MySQL; docs/results/wrk.md
	$(GO) run ./cmd/demo -bin bin/stock -strategies lock+version -phases wrk -out loadtest/out -wrk-doc docs/results/wrk.md -target demo-wrk $(DEMO_FLAGS)

profile: build ## a longer lock+version run with a CPU and an allocation profile of one instance, and the window's cost per order (CPU, MySQL statements and rows, Redis commands, allocations); docs/profile.md
	$(GO) run ./cmd/demo -bin bin/stock -strategies lock+version -tp-buyers 150000 \
		-tp-concurrency $(DEMO_TP_CONCURRENCY) -out loadtest/out -phases ceiling,throughput -profile docs/profile.md $(DEMO_FLAGS)
