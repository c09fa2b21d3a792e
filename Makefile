# The TTS mesh. A newcomer needs two commands: `make run` (then `make say` in another terminal) and `make test`.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TEXT ?= Hello! This is the text to speech mesh speaking.
OUT ?= hello.wav

.PHONY: run run-zones certs say test proto docs venv voice bench bench-load bench-quality bench-faults bench-doors k8s-validate image

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

# One row per fault scenario: completed, identical to fault-free, client errors, first-audio p95.
bench-faults: $(PY)
	$(PY) -m bench.faults

# Render each kustomize overlay and validate it offline against the Kubernetes schemas.
k8s-validate: $(PY)
	$(PY) -m scripts.k8s_validate

# The one image that runs any of the three services (needs a Docker engine).
image:
	docker build -t tts-mesh:dev .
