# saltus: the single entry point. CI runs `make check` (see .ci/run).
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
FUZZTIME  ?= 3s
BENCHTIME ?= 1s
PKGS      := ./...
# Packages whose code starts no goroutine and shares nothing between calls
# (the tokenizer, the request decoder, the image packer): the race detector
# has nothing to find there and slows their CPU-bound tests 5-10x, so `race`
# runs them without it (`make test` runs everything plainly).
NORACE    := ./tokenpool/tokenizer ./openai ./internal/cmd/mkimage
HELM_VERSION ?= v4.3.2

.PHONY: all build release image test race vet lint rules fmt bench bench-serve bench-policies browser-test browser-check anthropic-check fuzz-smoke helm-check check clean golden

all: build

build: ## the binary, at bin/saltus (static, as release builds it; internal/cmd/mkimage's test then reuses its compiled packages)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saltus ./cmd/saltus

release: ## static binaries for linux/amd64 and linux/arm64 in dist/, with the version (saltus version prints it)
	@mkdir -p dist
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o dist/saltus-linux-$$arch ./cmd/saltus || exit 1; \
	done

image: release ## the container image without Docker: an OCI layout in dist/oci and a docker-archive dist/saltus-image.tar (linux/amd64; internal/cmd/mkimage)
	rm -rf dist/oci
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./internal/cmd/mkimage \
		--binary dist/saltus-linux-amd64 --arch amd64 --version $(VERSION) \
		--revision $$(git rev-parse HEAD 2>/dev/null) \
		--layout dist/oci --archive dist/saltus-image.tar

test: ## unit and property tests
	$(GO) test -count=1 $(PKGS)

race: ## the same tests under the race detector (NORACE's packages without it: they start no goroutine); cmd/saltus takes 6-9 minutes of go test's default 10-minute timeout on 2 cores, hence 15
	$(GO) test -count=1 -race -timeout 15m $$($(GO) list $(PKGS) | grep -v -x -F $(foreach p,$(NORACE),-e github.com/saltus-lb/saltus/$(patsubst ./%,%,$(p))))
	$(GO) test -count=1 $(NORACE)

vet:
	$(GO) vet $(PKGS)

lint: ## gofmt and staticcheck (pinned in go.mod with `go get -tool`)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) tool staticcheck $(PKGS)

rules: ## the numbered rules' analyzers (rules/RULES.md): cmd/saltusvet as go vet's tool; fails on a finding
	$(GO) build -o bin/saltusvet ./cmd/saltusvet
	$(GO) vet -vettool=$(CURDIR)/bin/saltusvet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

bench: ## every benchmark, with allocations
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

bench-policies: ## issue 11's matrix: every policy × stress, multiturn, rag, hotspot, manydocs, unique on 8 sim engines (bench/policy-compare.sh; ~45 min)
	bench/policy-compare.sh

bench-serve: ## saltus vs nginx requests/s (whole and streamed) and --pin-shards, same run (bench/nginx-compare.sh; installs nginx if missing); added latency (bench/added-latency.sh)
	bench/nginx-compare.sh
	bench/added-latency.sh
	$(GO) test -run '^$$' -bench 'AddedLatency|Relay' -benchtime 5x ./bench

browser-check: ## browser-test without keeping screenshots (part of check)
	SHOTS= GO=$(GO) scripts/browser-test.sh

browser-test: ## the dashboard in headless Chromium against a running saltus, numbers checked against /metrics, screenshots to bench/results/issue14-dashboard (scripts/browser-test.sh; installs chromium with apt-get if missing; check runs it as browser-check)
	GO=$(GO) scripts/browser-test.sh

anthropic-check: ## Anthropic's TypeScript SDK (pinned in test/anthropic, npm ci) against saltus serve and two saltus sim engines: messages, streaming, tool use, prefix routing, errors (scripts/anthropic-sdk-test.sh; needs node and npm; part of check)
	GO=$(GO) scripts/anthropic-sdk-test.sh

fuzz-smoke: ## each fuzz target for FUZZTIME (default 3s: CI time; run longer with FUZZTIME=5m), FUZZJOBS at a time (default 2, one worker each); see scripts/fuzz-smoke.sh
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz-smoke.sh $(PKGS)

helm-check: ## the Helm chart deploy/helm/saltus: Helm built once from the Go module proxy into bin/helm (no download; 230 s of CPU cold, seconds once cached), lint --strict with the default values and each ci/*.yaml, the rendered objects decoded strictly against k8s.io/api (deploy/helm/check, its own module), the args and saltus.yaml loaded by saltus's config loader (cmd/saltus TestHelmChart; -race reuses race's test binary)
	GOBIN=$(CURDIR)/bin $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	bin/helm lint --strict deploy/helm/saltus
	for f in deploy/helm/saltus/ci/*.yaml; do bin/helm lint --strict deploy/helm/saltus -f $$f || exit 1; done
	cd deploy/helm/check && $(GO) vet ./... && HELM=$(CURDIR)/bin/helm $(GO) test -count=1 ./...
	HELM=$(CURDIR)/bin/helm $(GO) test -count=1 -race -run 'TestHelm|TestKubernetesManifests' ./cmd/saltus

check: vet lint rules build race fuzz-smoke browser-check helm-check anthropic-check ## what CI runs

golden: ## regenerate tokenizer and chat-template reference ids (needs Node and npm, and Python 3 with jinja2 and pydantic; not part of check)
	cd tokenpool/testdata/gen && npm install --no-audit --no-fund && node unicode.mjs && node gen.mjs && node chat.mjs && python3 chat_tools.py

clean:
	rm -rf bin dist
