# sglprov build, test and demo targets. Every tool a target needs is installed by
# `make deps` (Debian packages), which .ci/run calls first.
export GOTOOLCHAIN := local
export CGO_ENABLED := 1

GO      ?= go
BIN     := bin/sglprov
PKGS    := ./...
FUZZTIME ?= 5s

.PHONY: all build test unit e2e fuzz lint bench demo deps clean schema man rules

all: build

# -buildvcs=auto: the binary records the commit it was built from (sglprov version),
# whatever GOFLAGS says; in a git worktree, where Go finds no repository, .ci/vcs-ldflags
# stamps it.
build:
	$(GO) build -buildvcs=auto -ldflags "$$(.ci/vcs-ldflags github.com/sglprov/sglprov/pkg/buildinfo)" -o $(BIN) ./cmd/sglprov

# schema regenerates the recipes' JSON Schema that the shipped recipes name, and those of
# report.json and `status --json` (a test fails while one differs from what `sglprov
# schema` prints).
schema: build
	$(BIN) schema > docs/recipe.schema.json
	$(BIN) schema report > docs/report.schema.json
	$(BIN) schema status > docs/status.schema.json

# man writes the man page sglprov(1), made from the same text as the help.
man: build
	$(BIN) man > docs/sglprov.1

# test is everything CI runs: the Debian packages it needs (as root), lint, unit and CLI
# tests (the demo's test among them), a short fuzz run, the shipped alert rules through
# promtool and the real-systemd end-to-end test.
test: deps lint unit fuzz rules e2e

# rules checks the shipped Prometheus alert rules with Prometheus's own promtool and runs
# their unit tests (the Go tests do the same, and check every metric they name).
rules:
	cd contrib/prometheus && promtool check rules sglprov.rules.yml && promtool test rules sglprov.rules.test.yml

unit:
	$(GO) test -count=1 $(PKGS)

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./pkg/recipe
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./pkg/safetensors

e2e: build
	SGLPROV_E2E_SGLPROV=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m ./test/e2e -e2e

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@$(GO) mod tidy -diff || { echo "go mod tidy would change go.mod/go.sum (above): run go mod tidy"; exit 1; }

bench: build
	$(GO) test -run='^$$' -bench=. -benchmem ./pkg/engine ./pkg/fetch
	bench/run.sh

demo: build
	demo/run.sh

deps:
	./.ci/deps.sh

clean:
	rm -rf bin
