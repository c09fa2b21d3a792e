# syntax=docker/dockerfile:1
# One image runs any of the three services; the first argument names the service module:
#   docker run tts-mesh:dev services.gateway --acoustic local=acoustic:50052 --vocoder local=vocoder:50053
#   docker run tts-mesh:dev services.acoustic
#   docker run tts-mesh:dev services.vocoder
# Build with `make image` (docker build -t tts-mesh:dev .).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- deps: a virtualenv with exactly the runtime dependencies pinned in pyproject.toml ----------
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /build
# Only the dependency list is copied here, so code edits do not reinstall the dependencies.
COPY pyproject.toml ./
# The list is read from pyproject.toml itself: there is no second list to drift from it.
# torch==2.13.0 is satisfied from the CPU wheel index (2.13.0+cpu, no CUDA libraries); every other
# package comes from PyPI. A GPU image would swap this index for a CUDA one.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && pip install --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt

# --- runtime: the venv, the source, a warmed voice cache, a non-root user ---------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TTS_CACHE_DIR=/opt/tts-mesh/cache
RUN groupadd --system --gid 10001 tts \
 && useradd --system --uid 10001 --gid tts --home-dir /home/tts --create-home tts
COPY --from=deps /opt/venv /opt/venv
WORKDIR /app
COPY . .
# Convert the default Piper voice to torch weights and export its text side (encoder + duration
# predictor, one graph) for onnxruntime once, at build time, so a pod's start-up only reads the files
# (the root filesystem is read-only at run time). All are keyed by what they are made from (the ONNX
# file's sha256; the modules' weights and the torch and onnxruntime versions), so they cannot go stale.
# The float32 engines also export the stream step graphs a CPU without native bf16 runs.
RUN python -c "from libs.voice.assets import default_voice_assets; from libs.models.onnx_encoder import OnnxFrontEnd; OnnxFrontEnd.load(default_voice_assets().piper_models().acoustic)" \
 && python -c "from libs.voice.engine import AcousticEngine, EngineSettings, VocoderEngine; AcousticEngine.load_default(settings=EngineSettings(precision='fp32')); VocoderEngine.load_default(settings=EngineSettings(precision='fp32'))" \
 && chmod -R a+rX /opt/tts-mesh
USER 10001:10001
# gRPC: gateway 50051, acoustic 50052, vocoder 50053. Prometheus /metrics: 9101, 9102, 9103.
EXPOSE 50051 50052 50053 9101 9102 9103 8000
# Python is PID 1: the services install their own SIGTERM handler (health NOT_SERVING, then drain).
ENTRYPOINT ["python", "-m"]
CMD ["services.gateway"]
