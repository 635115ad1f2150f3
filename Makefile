GO ?= go
BIN := bin

.PHONY: build test test-deps test-short lint run bench benchmarks soak fuzz fmt

# build: compile tandem and tandemctl into ./bin, stamped with the VCS commit (tandem version)
build:
	$(GO) build -buildvcs=true -o $(BIN)/ ./cmd/...

# test: the full suite with the race detector, against real MariaDB and Redis (never skips)
test: test-deps
	$(GO) test -race -count=1 -timeout 30m ./...

# test-deps: install what the tests drive when missing (promtool, headless chromium; Debian packages)
test-deps:
	@scripts/test-deps

# test-short: unit tests only (skips everything that needs MariaDB or Redis)
test-short:
	$(GO) test -short -count=1 ./...

# lint: gofmt and go vet must be silent
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# run: the live demo (embedded or local stores, generated admin token, demo traffic)
run:
	$(GO) run ./cmd/tandem serve

# bench: a quick engine sweep (redis, mysql unit rows, naive single-row baseline) against the local stores
bench:
	$(GO) run ./cmd/tandem bench engine --concurrency 1,8,32,128 --duration 3s

# benchmarks: regenerate every figure of BENCHMARKS.md (engine sweeps with and without injected latency, HTTP per mode, kill switch)
benchmarks:
	mkdir -p artifacts
	$(GO) run ./cmd/tandem bench engine --duration 5s --json > artifacts/bench-engine-loopback.json
	$(GO) run ./cmd/tandem bench engine --duration 5s --mysql-latency 500us --json > artifacts/bench-engine-latency.json
	$(GO) run ./cmd/tandem bench engine --stores mysql,naive --items 8 --cart-size 5 --concurrency 32 --duration 5s --json > artifacts/bench-engine-cart5.json
	$(GO) run ./cmd/tandem bench http --modes redis,shadow,mysql --concurrency 32 --duration 8s --json > artifacts/bench-http-closed.json
	$(GO) run ./cmd/tandem bench http --killswitch 200 --json > artifacts/bench-killswitch.json

# soak: the long soak against real MariaDB and Redis (make soak SOAK=10m)
SOAK ?= 10m
soak:
	$(GO) test -race -count=1 -timeout 60m -v -run TestSoak ./internal/soak/ -soak.duration=$(SOAK) -soak.pods=3

# fuzz: a short bounded run of every fuzz target (FUZZTIME each; seeds are committed under testdata/fuzz)
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCartToken$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) ./cmd/tandem/
	$(GO) test -run '^$$' -fuzz '^FuzzReserveDecode$$' -fuzztime $(FUZZTIME) ./web/

# fmt: format the tree
fmt:
	gofmt -w .
