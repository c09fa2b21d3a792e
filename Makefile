# The TTS mesh. A newcomer needs two commands: `make run` (then `make say` in another terminal) and `make test`.
# `make` alone lists the targets: every target with a `## ` line above it.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# What the service runs on, and what the tests, benchmarks and voice building add to it.
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
TEXT ?= Hello! This is the text to speech mesh speaking.
OUT ?= hello.wav
# Processes `make test` spreads the test files over (the suite waits on sockets, sleeps and child
# processes: on two cores, two took it to 0.66x the time of one, and three were no faster than two,
# since two already keep both cores busy); each runs meshes of its own.
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help
.PHONY: help venv run run-zones certs web grpcjs say test test-fast proto docs voice bench bench-load bench-gaps bench-quality bench-faults \
	bench-doors bench-hostile bench-voices bench-text bench-text-zh bench-jobs fuzz idle-keepalive k8s-validate image image-gpu base-image \
	container-engine run-containers test-containers soak voice-fast voice-fast-adversarial

## List the targets.
help:
	@awk '/^## /{text=substr($$0,4); next} /^[a-z][a-z0-9-]*:/{if (text) printf "  %-16s %s\n", substr($$1,1,length($$1)-1), text; text=""} !/^## /{if ($$0 !~ /^[a-z][a-z0-9-]*:/) text=""}' $(MAKEFILE_LIST)

# The virtualenv with the service's own dependencies, made when missing or when pyproject.toml changes.
# torch is pinned: any other spec would download gigabytes of CUDA wheels. uv installs in half of pip's
# time (docs/dependencies.md); it reads no pip configuration, so a wheel folder pip is configured to look
# in (find-links: where a machine keeps its torch build) is passed on, read only when installing (`=`:
# other targets do not pay for asking pip). The runtime is byte-compiled as it is installed (where
# PYTHONDONTWRITEBYTECODE is set, every service start would compile torch again).
UV_VERSION := 0.13.10
UV := $(VENV)/bin/uv
FIND_LINKS = $(shell $(PYTHON) -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | head -n 1)
UV_INSTALL = $(UV) pip install --python $(PY) $(if $(FIND_LINKS),--find-links $(FIND_LINKS))
$(RUNTIME): pyproject.toml
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	$(UV_INSTALL) --compile-bytecode torch==2.13.0 -e .
	touch $@

# The same with the tools of the tests, benchmarks and voice building (the `dev` extra), not
# byte-compiled: most of their files are never imported (moto's server stack, cfn-lint, the openai
# types): the virtualenv from nothing takes 59 s instead of 74 s, and the suite's few processes that
# import them spend about 3 s more each.
$(DEV): $(RUNTIME)
	$(UV_INSTALL) torch==2.13.0 -e '.[dev]'
	touch $@

## Make .venv with the runtime and the development dependencies.
venv: $(DEV)

# Embedded Redis, acoustic, vocoder, gateway and the edge in the foreground; Ctrl-C (or SIGTERM) stops all.
# Installs the service's runtime dependencies only.
## Run the mesh (embedded Redis, the three services, the edge) in the foreground.
run: $(RUNTIME)
	$(PY) -m scripts.run_mesh $(RUN_ARGS)

## Run two zones (acoustic + vocoder each), Redis and a gateway in zone-a, in the foreground.
run-zones: $(RUNTIME)
	$(PY) -m scripts.run_zones

# `make run` makes the local CA and certificates on first use, under TTS_CACHE_DIR or ~/.cache/tts-mesh,
# in devmesh/tls; restart a running mesh to use new ones.
## Make the mesh's local CA and certificates again.
certs: $(RUNTIME)
	$(PY) -m libs.devmesh.certs --renew

# Types generated from protos/ with protoc-gen-es, then bundled with esbuild. Needs Node.js and npm; the
# page itself is served from the committed web/dist.
## Rebuild the web page's committed bundle (web/dist).
web:
	cd web && npm ci --no-audit --no-fund && npm run generate && npm run typecheck && npm run build

# The grpc-js client the resume test runs (tests/support/grpcjs), bundled with esbuild into its committed dist/.
## Rebuild the grpc-js test client's committed bundle (needs Node.js and npm).
grpcjs:
	cd tests/support/grpcjs && npm ci --no-audit --no-fund && npm run build

## Speak TEXT through the running gateway into OUT (format from the extension: .wav, .opus, .mp3, ...).
say: $(RUNTIME)
	$(PY) -m tts_mesh.cli say "$(TEXT)" -o "$(OUT)"

# The test files are spread over TEST_WORKERS processes, each file whole in one of them, taken in the
# order they are collected (end-to-end, integration, unit): the long files first, the short ones last
# to even out the end. (pytest-xdist would otherwise take the files with most tests first, which puts
# the files of one long test at the end, with the other process idle.)
# The project is byte-compiled first: where PYTHONDONTWRITEBYTECODE is set, each of the suite's few
# hundred processes would otherwise compile every module it imports.
## The whole suite: lint, then unit, integration and end-to-end tests (what CI runs; containers: test-containers).
test: $(DEV)
	$(PY) -m ruff check .
	$(PY) -m compileall -q -j 0 libs services scripts tts_mesh bench tests >/dev/null
	$(PY) -m pytest -q -m "not containers" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## The unit tests alone (pure code: no sockets, no processes, no real weights), in under a minute.
test-fast: $(DEV)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -m unit tests/unit

## Regenerate the gRPC stubs in libs/pb from protos/ (a test fails when they are stale).
proto: $(DEV)
	$(PY) -m scripts.gen_protos

## Regenerate the generated parts of the docs (settings table, benchmark tables); a test fails when stale.
docs: $(DEV)
	$(PY) -m scripts.render_docs

## Rebuild the default voice's trained pieces (mel head, mel adapter) from nothing: seeded, CPU only.
voice: $(DEV)
	$(PY) -m scripts.voice.build $(if $(VOICE),--voice $(VOICE))

## Retrain the default voice's fast tier (its student vocoder) from its quality tier, going on from its committed checkpoint: seeded, CPU only, about an hour on 2 cores from nothing.
voice-fast: $(DEV)
	$(PY) -m scripts.voice.fast_tier --evaluate --install

## The fast tier's adversarial stage (a GPU's work: DEVICE=cuda): its input bundle, then training with snapshots in build/fast-tier/snapshots.
voice-fast-adversarial: $(DEV)
	$(PY) -m scripts.voice.fast_tier_adversarial --bundle-only
	$(PY) -m scripts.voice.fast_tier_adversarial --device $(or $(DEVICE),cpu) --snapshot-every 1000

## Time to first audio, throughput, batch sweep and memory, side by side with piper-tts; CPU per audio second and per first audio of each tier.
bench: $(DEV)
	$(PY) -m bench.speed --out bench/results.md
	$(PY) -m bench.cpu_per_audio --tiers quality,fast

## Many listeners at once, and real time under CPU quotas with random arrivals, side by side with a piper-tts pool; a burst past capacity in auto.
bench-load: $(DEV)
	$(PY) -m bench.load_table --out bench/load.md
	$(PY) -m bench.realtime --out bench/realtime.md
	$(PY) -m bench.tier_burst

## DNSMOS and word error rate of our full path (both tiers), copy synthesis and piper-tts on held-out sentences; a long first sentence spoken whole and with its opening first; what each model part and text-encoder layer costs, how far int8 moves each layer, and what int8 feed-forward layers would cost the fast tier's ear; the pitch each tier speaks with.
bench-quality: $(DEV)
	$(PY) -m bench.quality
	$(PY) -m bench.opening --out bench/opening.md
	$(PY) -m bench.model_layers
	$(PY) -m bench.tier_pitch

## First audio through each front door, Opus against PCM, and bytes per second of every encoding.
bench-doors: $(DEV)
	$(PY) -m bench.doors --out bench/doors.md

## Phoneme error rate and heteronym accuracy of the text front end against piper-tts, and its cost.
## What a worker's voices take in memory (one, four), and whether its voice memory budget holds.
bench-voices: $(DEV)
	$(PY) -m bench.voices --out bench/voices.md

bench-text: $(DEV)
	$(PY) -m bench.text_front_end --out bench/text.md

## Mandarin reading: polyphone accuracy and phoneme error rate against the gold sets, next to espeak-ng's.
bench-text-zh: $(DEV)
	$(PY) -m bench.text_zh --out bench/text_zh.md

## A 100,000-character job alone and next to 8 live streams; the cache's hit rate with promotion.
bench-jobs: $(DEV)
	$(PY) -m bench.jobs --chars 100000 --live-streams 8 --compare --out bench/jobs.md
	$(PY) -m bench.prewarm --out bench/prewarm.md

## Bursts under a CPU quota with every step traced: what listeners heard, and the late step behind each gap.
bench-gaps: $(DEV)
	$(PY) -m bench.gaps --detail

## One row per fault scenario: completed, identical to fault-free, client errors, first-audio p95.
bench-faults: $(DEV)
	$(PY) -m bench.faults

## Five minutes of cold traffic at every door with clients hanging up: failures, what is left, memory growth.
bench-door-soak: $(DEV)
	$(PY) -m bench.door_soak --duration-s 300 --out bench/door_soak.md

## One row per hostile input or caller: status, healthy callers' worst delay, peak RSS, still speaking.
bench-hostile: $(DEV)
	$(PY) -m bench.hostile

# The suite runs 60 s of it with a fixed seed; SEED=<n> repeats a run.
FUZZ_SECONDS ?= 600
SEED ?= random
## Mutated raw requests against every server of a fresh mesh for FUZZ_SECONDS.
fuzz: $(DEV)
	$(PY) -m tests.support.fuzz.live --seconds $(FUZZ_SECONDS) --seed $(SEED)

## Ten minutes of an idle mesh whose connections ping as often as allowed: no GOAWAY, held streams survive.
idle-keepalive: $(DEV)
	$(PY) -m bench.idle_keepalive --minutes 10

## Render each kustomize overlay and validate it offline against the Kubernetes schemas.
k8s-validate: $(DEV)
	$(PY) -m scripts.k8s_validate

# Podman or Docker, whichever is present (ENGINE=podman|docker to choose). BASE_IMAGE=auto builds on the
# registry's python:3.11 slim image when it can be pulled, else on a local Debian base (make base-image).
BASE_IMAGE ?= auto
## The CPU image tts-mesh:dev (any service), with podman or docker; BASE_IMAGE=auto|<image>.
image: container-engine
	python3 -m scripts.containers.build_image --target runtime --base-image "$(BASE_IMAGE)"

## The GPU image tts-mesh-gpu:dev (CUDA torch for the workers; several GB of CUDA wheels).
image-gpu: container-engine
	python3 -m scripts.containers.build_image --target gpu --base-image "$(BASE_IMAGE)"

## A local Debian base image with Python 3.11 for machines without an image registry (debootstrap; root).
base-image:
	scripts/containers/base_image.sh

## Install podman (runc, netavark) and its configuration when no container engine is present (root).
container-engine:
	scripts/containers/engine_setup.sh

## The mesh in containers (Redis, workers, gateway, edge), as the k8s base runs them; needs `make image`.
run-containers: $(RUNTIME)
	$(PY) -m scripts.run_containers

## The end-to-end tests against the mesh in containers (builds the image first).
test-containers: $(DEV) image
	$(PY) -m pytest -q -m containers tests/e2e

SOAK_MINUTES ?= 30
SOAK_LOAD ?= 0.7
## Soak the mesh in containers: SOAK_MINUTES at SOAK_LOAD of capacity, a worker killed every 5 min, Redis restarted once.
soak: $(DEV) image
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) --load $(SOAK_LOAD) --out bench/soak.md
