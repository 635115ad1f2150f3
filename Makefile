GO ?= go
BIN := bin

.PHONY: build test test-deps test-short lint run bench benchmarks soak stress fuzz fmt benchmarks-pod

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

# benchmarks: run every cell of BENCHMARKS.md (5 s cells, about 6 minutes; run it on a quiet machine, as root so the servers' CPU is read from /proc), JSON in artifacts/, then regenerate its tables (cost per op on both sides, achieved / CPU-bound limit) and figures
benchmarks:
	mkdir -p artifacts
	$(GO) build -o $(BIN)/tandem ./cmd/tandem
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(BIN)/tandem bench engine --stores redis,mysql,naive --concurrency 1,8,32,128 --duration 5s --json > artifacts/bench-engine-loopback.json
	$(BIN)/tandem bench engine --stores mysql,naive --concurrency 32 --duration 5s --json > artifacts/bench-engine-loopback-2.json
	$(BIN)/tandem bench engine --stores mysql,naive --concurrency 32 --duration 5s --json > artifacts/bench-engine-loopback-3.json
	$(BIN)/tandem bench engine --stores mysql,naive --concurrency 1,8,32,128 --duration 5s --mysql-latency 500us --json > artifacts/bench-engine-latency.json
	$(BIN)/tandem bench engine --stores mysql,naive --items 8 --cart-size 5 --concurrency 32 --duration 5s --json > artifacts/bench-engine-cart5.json
	$(BIN)/tandem bench http --modes redis,shadow,mysql --concurrency 32 --compare-engine --duration 5s --json > artifacts/bench-http-closed.json
	$(BIN)/tandem bench http --modes redis,shadow --rate-of-mysql 0.5 --repeat 3 --concurrency 32 --duration 5s --json > artifacts/bench-http-half-mysql.json
	$(BIN)/tandem bench http --modes redis --concurrency 1 --compare-engine --duration 5s --json > artifacts/bench-http-c1.json
	$(BIN)/tandem bench http --killswitch 200 --json > artifacts/bench-killswitch.json
	$(BIN)/tandem bench backfill --holds 50000 --rate 400 --json > artifacts/bench-backfill.json
	$(BIN)/tandem bench report --update BENCHMARKS.md artifacts/bench-engine-loopback.json artifacts/bench-engine-loopback-2.json \
		artifacts/bench-engine-loopback-3.json artifacts/bench-engine-latency.json \
		artifacts/bench-engine-cart5.json artifacts/bench-http-closed.json artifacts/bench-http-half-mysql.json \
		artifacts/bench-http-c1.json artifacts/bench-killswitch.json artifacts/bench-backfill.json

# benchmarks-pod: issue 22's figures (a pod of real size), as JSON in artifacts/ (on a quiet machine)
benchmarks-pod:
	mkdir -p artifacts
	$(GO) build -o $(BIN)/tandem ./cmd/tandem
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg)"
	for i in 1 2 3; do $(BIN)/tandem bench backfill --holds 200000 --rate 0 --json > artifacts/bench-pod-quiet-$$i.json || exit 1; done
	for i in 1 2; do $(BIN)/tandem bench plan --holds 200000 --json > artifacts/bench-pod-plan-$$i.json || exit 1; done
	$(BIN)/tandem bench backfill --holds 50000 --rate 400 --warmup 5s --json > artifacts/bench-pod-buyers.json
	$(BIN)/tandem bench backfill --holds 50000 --rate 400 --warmup 5s --throttle=false --json > artifacts/bench-pod-buyers-nothrottle.json
	$(BIN)/tandem bench backfill --holds 200000 --rate 400 --warmup 5s --audit --json > artifacts/bench-pod-audit.json

# soak: the long soak against real MariaDB and Redis (make soak SOAK=10m)
SOAK ?= 10m
soak:
	$(GO) test -race -count=1 -timeout 60m -v -run TestSoak ./internal/soak/ -soak.duration=$(SOAK) -soak.pods=3

# stress: the concurrency-heavy packages, -race -count=5 each, while two CPU burners run (at most STRESSTIME)
STRESSTIME ?= 60m
STRESS_PKGS ?= ./dualwrite/ ./rollout/ ./comparator/ ./internal/linearize/ ./internal/faulttest/ ./web/dashboard/
stress: test-deps
	GO=$(GO) scripts/stress $(STRESSTIME) 5 $(STRESS_PKGS)

# fuzz: a short bounded run of every fuzz target (FUZZTIME each; seeds are committed under testdata/fuzz).
# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can fail a target with a bare
# "context deadline exceeded" and no failing input when its deadline races a busy worker
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 50000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCartToken$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) ./cmd/tandem/internal/server/
	$(GO) test -run '^$$' -fuzz '^FuzzReserveDecode$$' -fuzztime $(FUZZTIME) ./web/
	$(GO) test -run '^$$' -fuzz '^FuzzReserveFastPath$$' -fuzztime $(FUZZTIME) ./web/

# fmt: format the tree
fmt:
	gofmt -w .
