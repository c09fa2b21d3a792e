# The TTS mesh. A newcomer needs two commands: `make run` (then `make say` in another terminal) and `make test`.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TEXT ?= Hello! This is the text to speech mesh speaking.
OUT ?= hello.wav

.PHONY: run say test proto venv

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

# Speak TEXT through the running gateway into the WAV file OUT.
say: $(PY)
	$(PY) -m scripts.say --text "$(TEXT)" --out "$(OUT)"

test: $(PY)
	$(PY) -m pytest -q

# Regenerate the gRPC stubs in libs/pb from protos/ (a test fails when they are stale).
proto: $(PY)
	$(PY) -m scripts.gen_protos
