GO ?= go
export CGO_ENABLED ?= 1

.PHONY: test vet unit run build bench chaos demo k6-check

## test: vet + the whole suite with the race detector (what CI runs)
test: vet
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

build:
	$(GO) build -o bin/stock ./cmd/stock

## run: migrate and serve against the local MySQL and Redis
run: build
	./bin/stock migrate
	./bin/stock serve

## bench: lock benchmarks side by side with bsm/redislock and redsync (separate module)
bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 20m .
