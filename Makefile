GO ?= go
export CGO_ENABLED ?= 1

.PHONY: test vet unit run build bench chaos demo k6-check

## test: vet, the whole suite with the race detector, the compose file and k6 type checks (what CI runs)
test: vet unit fuzz compose-check k6-check

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

## fuzz: each fuzz target for FUZZTIME (request decoding, key and SKU validators, POST /v1/orders)
FUZZTIME ?= 5s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeOrder$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzValidKey$$' -fuzztime $(FUZZTIME) ./internal/handler
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceOrder$$' -fuzztime $(FUZZTIME) ./internal/handler

build:
	$(GO) build -o bin/stock ./cmd/stock

## run: migrate and serve against the local MySQL and Redis
run: build
	./bin/stock migrate
	./bin/stock serve

## bench: lock benchmarks side by side with bsm/redislock and redsync (separate module)
bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m .

## k6-check: type-check the k6 scripts against @types/k6 (no k6 needed)
## compose-check: validate docker-compose.yml, loadtest/nginx.conf and the Dockerfile without Docker
.PHONY: k6-check compose-check
k6-check:
	cd loadtest/k6 && npm ci --no-audit --no-fund && npm run check

compose-check:
	cd loadtest/composecheck && $(GO) test -count=1 ./...
