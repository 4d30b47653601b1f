# sglprov build, test and demo targets. Every tool a target needs is installed by
# `make deps` (Debian packages), which .ci/run calls first.
export GOTOOLCHAIN := local
export CGO_ENABLED := 1
# go-nvml's cgo wrappers call the NVML functions that NVIDIA's header marks deprecated: gcc
# says so about 30 times (150 lines) on every fresh build. That one warning is silenced; go-nvml
# is the only cgo package besides the standard library's, and every other warning still shows.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# The test targets pipe `go test -json` through internal/testsummary (pipefail keeps go
# test's own failure), which prints what plain go test prints, then each skipped test with
# its reason and the suite's counts; `make test` ends with the total of every suite.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c
TESTSUMMARY := bin/testsummary
COUNTS      := bin/test-counts

GO      ?= go
BIN     := bin/sglprov
PKGS    := ./...
FUZZTIME ?= 5s

.PHONY: all build test unit e2e fuzz lint bench demo deps clean schema man verify-patches rules

all: build

# -buildvcs=auto: the binary records the commit it was built from (sglprov version),
# whatever GOFLAGS says; in a git worktree, where Go finds no repository, .ci/vcs-ldflags
# stamps it.
build:
	$(GO) build -buildvcs=auto -ldflags "$$(.ci/vcs-ldflags github.com/sglprov/sglprov/pkg/buildinfo)" -o $(BIN) ./cmd/sglprov

# schema regenerates the recipes' JSON Schema that the shipped recipes name (a test fails
# while it differs from what `sglprov schema` prints), after the field descriptions it
# carries, taken from the Go doc comments (pkg/recipe/fielddocs_gen.go; a test fails while
# that is stale too).
schema:
	$(GO) run ./internal/fielddocs/gen
	$(MAKE) build
	$(BIN) schema > docs/recipe.schema.json
	$(BIN) schema report > docs/report.schema.json
	$(BIN) schema status > docs/status.schema.json
	$(BIN) schema plan > docs/plan.schema.json

# man writes the man page sglprov(1), made from the same text as the help.
man: build
	$(BIN) man > docs/sglprov.1

# test is everything CI runs: the Debian packages it needs (as root), lint, unit and CLI
# tests (the demo's test among them), a short fuzz run and the real-systemd end-to-end test.
# Each suite ends with its line "SUITE: N passed, N failed, N skipped" (the skipped tests
# above it, by name and reason); the last line is the total, "N passed, N failed, N skipped".
test: deps lint
	@rm -f $(COUNTS)
	@$(MAKE) --no-print-directory unit fuzz rules e2e verify-patches RECORD="-record $(CURDIR)/$(COUNTS)" COUNTS_FILE=$(CURDIR)/$(COUNTS)
	@$(TESTSUMMARY) -total $(COUNTS)

# rules checks the shipped Prometheus alert rules with Prometheus's own promtool and runs
# their unit tests (the Go tests do the same, and check every metric they name).
rules:
	cd contrib/prometheus && promtool check rules sglprov.rules.yml && promtool test rules sglprov.rules.test.yml

$(TESTSUMMARY): $(wildcard internal/testsummary/*.go)
	$(GO) build -o $@ ./internal/testsummary

# unit allows each package 30 minutes: the command-line scripts (cmd/sglprov) build and run
# sglprov hundreds of times and pass 10 minutes on a loaded 2-core machine.
unit: $(TESTSUMMARY)
	$(GO) test -json -count=1 -timeout 30m $(PKGS) | $(TESTSUMMARY) -suite unit $(RECORD)

fuzz: $(TESTSUMMARY)
	$(GO) test -json -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./pkg/recipe | $(TESTSUMMARY) -suite fuzz-recipe $(RECORD)
	$(GO) test -json -run='^$$' -fuzz=FuzzParse -fuzztime=$(FUZZTIME) ./pkg/safetensors | $(TESTSUMMARY) -suite fuzz-safetensors $(RECORD)

e2e: build $(TESTSUMMARY)
	SGLPROV_E2E_SGLPROV=$(CURDIR)/$(BIN) $(GO) test -json -count=1 -timeout 20m ./test/e2e -e2e | $(TESTSUMMARY) -suite e2e $(RECORD)

# verify-patches fetches, at each shipped SGLang series' pinned commit, just the files the
# series modifies and applies the series to them (TestShippedSGLangSeriesApplies). It needs
# the git host; where that cannot be reached (CI), it says so and skips.
verify-patches: $(TESTSUMMARY)
	COUNTS=$(COUNTS_FILE) .ci/verify-patches

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@$(GO) mod tidy -diff || { echo "go mod tidy would change go.mod/go.sum (above): run go mod tidy"; exit 1; }

# bench runs the Go benchmarks (the whole-node ones, bench/nodeb, need the registry, pip
# and a C compiler, which `make deps` installs as root; the real-size one about 25 GB of
# disk for 10 minutes), then bench/run.sh (which installs
# its own tools: nginx, aria2, ...). docs/benchmarks.md says what each measures.
bench: deps build
	$(GO) test -run='^$$' -bench=. -benchmem -timeout 60m ./pkg/engine ./pkg/fetch ./pkg/cache ./pkg/pylock ./bench/nodeb
	bench/run.sh

demo: build
	demo/run.sh

deps:
	./.ci/deps.sh

clean:
	rm -rf bin
