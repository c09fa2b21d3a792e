# syntax=docker/dockerfile:1
# One image runs any of the three services; the first argument names the service module:
#   docker run tts-mesh:dev services.gateway --acoustic local=acoustic:50052 --vocoder local=vocoder:50053
#   docker run tts-mesh:dev services.acoustic
#   docker run tts-mesh:dev services.vocoder
# Two targets, built with podman or docker (scripts/containers/build_image.py):
#   runtime (the default, last stage): CPU-only torch, every service    -> tts-mesh      (make image)
#   gpu: torch and onnxruntime-gpu with their CUDA libraries, for the workers on GPU nodes -> tts-mesh-gpu  (make image-gpu)
#     docker run --gpus all tts-mesh-gpu:dev services.acoustic --device cuda

# The base image: the registry's Python by default; `make image` passes a local Debian base where no
# registry is reachable (scripts/containers/base_image.sh), which has the same `python`, venv and useradd.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
# Where the CPU build of torch comes from; empty: from pip's own configuration (`make image` leaves it
# out when the index does not answer, and mounts the machine's pip configuration into the RUN steps).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# --- deps: a virtualenv with exactly the runtime dependencies pinned in pyproject.toml ----------
FROM ${PYTHON_IMAGE} AS deps
ARG TORCH_INDEX_URL
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
 && pip install ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r requirements.txt \
 && python -c "import torch, sys; sys.exit(torch.version.cuda and f'torch {torch.__version__} is a CUDA build: the CPU image takes the CPU wheel')"

# --- deps-gpu: the same list, torch from PyPI: its Linux wheel is the CUDA build, with the CUDA
# runtime, cuDNN and NCCL as pip packages (the node's NVIDIA driver comes in through the container
# toolkit), so the base image needs no CUDA of its own. onnxruntime is the GPU build, the `gpu`
# extra of pyproject.toml, listed in place of the CPU pin. piper-tts still depends on `onnxruntime`,
# so pip brings the CPU build too, and the two packages share one module directory: whichever is
# installed last owns it. Both are removed and the list installed again without dependencies, which
# puts back onnxruntime-gpu alone (everything else is already there); the check after it fails the
# build when the module has no CUDA provider.
# Graphs built for a CUDA device run on its CUDA provider (libs/models/onnx_providers.py); the
# engines on a GPU still run their text side and stream steps in torch (libs/voice/runtime.py).
FROM ${PYTHON_IMAGE} AS deps-gpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /build
COPY pyproject.toml ./
RUN python -c "import tomllib; project = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join([d for d in project['dependencies'] if not d.startswith('onnxruntime==')] + project['optional-dependencies']['gpu']))" > requirements.txt \
 && pip install -r requirements.txt \
 && pip uninstall -y onnxruntime onnxruntime-gpu \
 && pip install --no-deps -r requirements.txt \
 && python -c "import torch, sys; sys.exit(None if torch.version.cuda else f'torch {torch.__version__} has no CUDA: the GPU image takes the CUDA build from the index')" \
 && python -c "import onnxruntime, sys; sys.exit(None if 'CUDAExecutionProvider' in onnxruntime.get_available_providers() else 'onnxruntime has no CUDA provider: the CPU build owns the module')"

# --- app: the source, a non-root user, the entrypoint; each target adds its venv -------------
FROM ${PYTHON_IMAGE} AS app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TTS_CACHE_DIR=/opt/tts-mesh/cache
RUN groupadd --system --gid 10001 tts \
 && useradd --system --uid 10001 --gid tts --home-dir /home/tts --create-home tts
WORKDIR /app
COPY . .
# Bytecode made now: the root filesystem is read-only at run time, so nothing compiled there is kept
# and every start would compile the sources again.
RUN python -m compileall -q /app
# gRPC: gateway 50051, acoustic 50052, vocoder 50053. Prometheus /metrics: 9101, 9102, 9103.
EXPOSE 50051 50052 50053 9101 9102 9103 8000
# Python is PID 1: the services install their own SIGTERM handler (health NOT_SERVING, then drain).
ENTRYPOINT ["python", "-m"]
CMD ["services.gateway"]

# --- gpu: the CUDA venv and a warmed voice cache (the same warm-up as runtime's, below) --------
FROM app AS gpu
COPY --from=deps-gpu /opt/venv /opt/venv
RUN python -c "from libs.voice.assets import default_voice_assets; from libs.models.onnx_encoder import OnnxFrontEnd; OnnxFrontEnd.load(default_voice_assets().piper_models().acoustic)" \
 && python -c "from libs.voice.engine import AcousticEngine, EngineSettings, VocoderEngine; AcousticEngine.load_default(settings=EngineSettings(precision='fp32')); VocoderEngine.load_default(settings=EngineSettings(precision='fp32'))" \
 && chmod -R a+rX /opt/tts-mesh
USER 10001:10001
# Workers on this image use the GPU and batch concurrent streams into one step by default.
ENV TTS_DEVICE=cuda \
    TTS_MAX_BATCH=8

# --- runtime (default target): the CPU venv, a warmed voice cache, a non-root user ------------
FROM app AS runtime
COPY --from=deps /opt/venv /opt/venv
# Convert the default Piper voice to torch weights and export its text side (encoder + duration
# predictor, one graph) for onnxruntime once, at build time, so a pod's start-up only reads the files
# (the root filesystem is read-only at run time). All are keyed by what they are made from (the ONNX
# file's sha256; the modules' weights and the torch and onnxruntime versions), so they cannot go stale.
# The float32 engines also export the stream step graphs a CPU without native bf16 runs.
RUN python -c "from libs.voice.assets import default_voice_assets; from libs.models.onnx_encoder import OnnxFrontEnd; OnnxFrontEnd.load(default_voice_assets().piper_models().acoustic)" \
 && python -c "from libs.voice.engine import AcousticEngine, EngineSettings, VocoderEngine; AcousticEngine.load_default(settings=EngineSettings(precision='fp32')); VocoderEngine.load_default(settings=EngineSettings(precision='fp32'))" \
 && chmod -R a+rX /opt/tts-mesh
USER 10001:10001
