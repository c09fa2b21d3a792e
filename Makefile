# The TTS mesh. A newcomer needs two commands: `make run` (then `make say` in another terminal) and `make test`.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TEXT ?= Hello! This is the text to speech mesh speaking.
OUT ?= hello.wav

.PHONY: run run-zones certs say test proto docs venv voice bench bench-load bench-quality bench-faults bench-doors bench-hostile bench-text bench-jobs fuzz idle-keepalive k8s-validate image

# The virtualenv, created only when missing. torch comes first and pinned: any other spec would
# download gigabytes of CUDA wheels.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'

venv: $(PY)

# Embedded Redis + acoustic + vocoder + gateway in the foreground; Ctrl-C (or SIGTERM) stops all.
run: $(PY)
	$(PY) -m scripts.run_mesh

# Two zones (acoustic + vocoder each), Redis and a gateway in zone-a, in the foreground; Ctrl-C stops all.
run-zones: $(PY)
	$(PY) -m scripts.run_zones

# Make the mesh's local CA and certificates again (`make run` makes them on first use, under
# TTS_CACHE_DIR or ~/.cache/tts-mesh, in devmesh/tls); restart a running mesh to use them.
certs: $(PY)
	$(PY) -m libs.devmesh.certs --renew

# Rebuild the web page's committed bundle (web/dist): types generated from protos/ with protoc-gen-es,
# then bundled with esbuild. Needs Node.js and npm; the page itself is served from web/dist.
web:
	cd web && npm ci --no-audit --no-fund && npm run generate && npm run typecheck && npm run build

# Speak TEXT through the running gateway into OUT (the format follows its extension: .wav, .opus, .mp3, ...).
say: $(PY)
	$(PY) -m tts_mesh.cli say "$(TEXT)" -o "$(OUT)"

test: $(PY)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# Regenerate the gRPC stubs in libs/pb from protos/ (a test fails when they are stale).
proto: $(PY)
	$(PY) -m scripts.gen_protos

# Regenerate the generated parts of README.md: the settings table (from the settings' declarations) and the
# benchmark summary (from bench/results.md).
docs: $(PY)
	$(PY) -m scripts.render_docs

# Rebuild the default voice's trained pieces (mel head, mel adapter) from nothing: seeded, CPU only.
voice: $(PY)
	$(PY) -m scripts.voice.build

# Time to first audio, throughput, batch sweep and memory, side by side with piper-tts (one table).
bench: $(PY)
	$(PY) -m bench.speed --out bench/results.md

# Many listeners at once: first audio, playback stalls and refusals at 1 to 48 concurrent cold streams, side by
# side with a pool of piper-tts workers, and the largest count served in real time (one table).
bench-load: $(PY)
	$(PY) -m bench.load_table --out bench/load.md

# DNSMOS of our full path, copy synthesis and piper-tts on held-out sentences (one table).
bench-quality: $(PY)
	$(PY) -m bench.quality

# First audio through each front door (direct, through the edge, grpc-web, HTTP), Opus against PCM, and bytes per
# second of every encoding, on one mesh in one run.
bench-doors: $(PY)
	$(PY) -m bench.doors --out bench/doors.md

# Phoneme error rate on written forms and heteronym accuracy, our text front end against piper-tts's phonemes of the raw
# text (test sets in bench/data), and the reading step's cost per sentence; writes bench/text.md (make docs copies it).
bench-text: $(PY)
	$(PY) -m bench.text_front_end --out bench/text.md

# A 100,000-character job alone and next to 8 live streams, its file against streaming the same text; then the
# cache's hit rate on a Zipf sentence workload without and with promotion.
bench-jobs: $(PY)
	$(PY) -m bench.jobs --chars 100000 --live-streams 8 --compare --out bench/jobs.md
	$(PY) -m bench.prewarm --out bench/prewarm.md

# One row per fault scenario: completed, identical to fault-free, client errors, first-audio p95.
bench-faults: $(PY)
	$(PY) -m bench.faults

# One row per hostile input or caller: the client's status, the worst delay of healthy calls meanwhile, each
# service's peak RSS, and whether the mesh still speaks.
bench-hostile: $(PY)
	$(PY) -m bench.hostile

# Mutated raw requests against every server of a fresh mesh for FUZZ_SECONDS (the suite runs 60 s of it with a
# fixed seed); SEED=<n> repeats a run.
FUZZ_SECONDS ?= 600
SEED ?= random
fuzz: $(PY)
	$(PY) -m tests.fuzz.live --seconds $(FUZZ_SECONDS) --seed $(SEED)

# Ten minutes of an idle mesh whose connections ping as often as allowed: no GOAWAY, held streams survive.
idle-keepalive: $(PY)
	$(PY) -m bench.idle_keepalive --minutes 10

# Render each kustomize overlay and validate it offline against the Kubernetes schemas.
k8s-validate: $(PY)
	$(PY) -m scripts.k8s_validate

# The images (need a Docker engine): tts-mesh (CPU, any service) and tts-mesh-gpu (CUDA workers).
image:
	docker build --target runtime -t tts-mesh:dev .
	docker build --target gpu -t tts-mesh-gpu:dev .
