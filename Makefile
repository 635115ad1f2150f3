GO ?= go
BIN := bin

.PHONY: build test test-short lint run bench soak fuzz fmt

# build: compile tandem and tandemctl into ./bin
build:
	$(GO) build -o $(BIN)/ ./cmd/...

# test: the full suite with the race detector, against real MariaDB and Redis (never skips)
test:
	$(GO) test -race -count=1 -timeout 30m ./...

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

# bench: engine benchmarks against real MariaDB and Redis
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./mysqlres/ ./redisres/

# fuzz: a short bounded run of every fuzz target (FUZZTIME each; seeds are committed under testdata/fuzz)
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCartToken$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) ./cmd/tandem/
	$(GO) test -run '^$$' -fuzz '^FuzzReserveDecode$$' -fuzztime $(FUZZTIME) ./web/

# fmt: format the tree
fmt:
	gofmt -w .
