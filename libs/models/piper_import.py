"""Import a Piper voice (.onnx + .onnx.json) into our torch modules, with an on-disk cache.

Most ONNX initializers keep their torch parameter names. The rest are mapped through the graph:

- The flow's WN convolutions come out as `onnx::Conv_NNNN` (weight norm was folded at export);
  the Conv node that consumes each one is named after its module
  (`/flow/flows.6/enc/in_layers.0/Conv` -> `flow.flows.6.enc.in_layers.0.weight`).
- The phoneme embedding of a single-speaker export is called `sid`: the exporter gives its unused
  fourth input name to the first parameter. The Gather node `/enc_p/emb/Gather` identifies it.
- `dp.flows.0.logs` was constant-folded into `exp(-logs)` (`/dp/flows.0/Exp_output_0`).
- Everything else unnamed is a graph constant (shapes, split sizes, scalars), not a parameter.

Parameters the exported inference graph does not contain (the duration predictor's training-only
`post_*` modules and `flows.1`) keep their initial values; inference never runs them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch

from libs.models.hifigan import Generator, GeneratorConfig
from libs.models.modules import ElementwiseAffine
from libs.models.vits import VitsAcoustic, VitsConfig

CACHE_FORMAT_VERSION: Final = 1
CACHE_DIR_ENV: Final = "TTS_CACHE_DIR"
DEFAULT_CACHE_DIR: Final = Path("~/.cache/tts-mesh")
DEFAULT_HOP_LENGTH: Final = 256
# Present in a training checkpoint, absent from an exported inference graph.
INFERENCE_UNUSED_PREFIXES: Final = ("dp.post_pre.", "dp.post_proj.", "dp.post_convs.", "dp.post_flows.", "dp.flows.1.")
PARAMETER_PREFIXES: Final = ("enc_p.", "dp.", "flow.", "dec.", "emb_g.")
FOLDED_EXP_SUFFIX: Final = "/Exp_output_0"


@dataclass(frozen=True)
class PiperVoiceConfig:
    """The parts of a Piper .onnx.json that synthesis needs."""

    sample_rate_hz: int
    """Output sample rate."""
    hop_length: int
    """Audio samples per latent frame."""
    noise_scale: float
    """Default prior noise scale."""
    length_scale: float
    """Default duration multiplier (larger is slower)."""
    noise_w: float
    """Default duration noise scale."""
    phoneme_id_map: dict[str, list[int]]
    """Phoneme (a codepoint string) -> ids."""
    num_speakers: int
    """Speakers in the voice (1 for single-speaker)."""
    speaker_id_map: dict[str, int]
    """Speaker name -> id (empty for single-speaker)."""
    espeak_voice: str
    """espeak-ng voice used for phonemisation."""
    num_symbols: int
    """Size of the phoneme id space."""

    @staticmethod
    def from_dict(config: dict[str, Any]) -> PiperVoiceConfig:
        """Read the dict of a Piper .onnx.json."""
        inference = config.get("inference", {})
        phoneme_id_map = {str(k): [int(i) for i in v] for k, v in config["phoneme_id_map"].items()}
        return PiperVoiceConfig(
            sample_rate_hz=int(config["audio"]["sample_rate"]),
            hop_length=int(config["audio"].get("hop_length", DEFAULT_HOP_LENGTH)),
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            phoneme_id_map=phoneme_id_map,
            num_speakers=int(config.get("num_speakers", 1)),
            speaker_id_map={str(k): int(v) for k, v in config.get("speaker_id_map", {}).items()},
            espeak_voice=str(config.get("espeak", {}).get("voice", "")),
            num_symbols=int(config.get("num_symbols", 1 + max(i for ids in phoneme_id_map.values() for i in ids))),
        )


@dataclass
class PiperVoiceModels:
    """A Piper voice as torch modules, in eval mode with weight norm folded."""

    acoustic: VitsAcoustic
    """Text encoder, duration predictor and flow."""
    decoder: Generator
    """The HiFi-GAN decoder (latent z -> audio)."""
    config: PiperVoiceConfig
    """Sample rate, default scales, phoneme map and speakers."""
    onnx_sha256: str
    """Hex sha256 of the .onnx file the weights came from."""
    loaded_from_cache: bool = field(default=False)
    """True when the weights came from the cache without parsing the ONNX file."""


@dataclass
class ConvertedVoice:
    """Weights and shapes read out of a Piper ONNX graph."""

    acoustic_config: VitsConfig
    decoder_config: GeneratorConfig
    acoustic_state: dict[str, torch.Tensor]
    decoder_state: dict[str, torch.Tensor]
    graph_constants: list[str]
    """Unnamed initializers that are constants of the graph, not parameters."""


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """$TTS_CACHE_DIR, else ~/.cache/tts-mesh."""
    return Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR).expanduser()


def _module_path(node_name: str) -> str:
    """'/flow/flows.6/enc/in_layers.0/Conv' -> 'flow.flows.6.enc.in_layers.0'."""
    return ".".join(node_name.strip("/").split("/")[:-1])


def convert_piper_onnx(onnx_path: str | Path) -> ConvertedVoice:
    """Read every parameter out of a Piper ONNX file and work out the model shapes from the graph."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    arrays = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    params: dict[str, np.ndarray] = {name: value for name, value in arrays.items() if name.startswith(PARAMETER_PREFIXES)}
    convs: dict[str, dict[str, list[int]]] = {}
    folded_exp: dict[str, np.ndarray] = {}

    for node in graph.node:
        if node.op_type in ("Conv", "ConvTranspose"):
            module = _module_path(node.name)
            convs[module] = {a.name: list(a.ints) for a in node.attribute if a.ints}
            weight = node.input[1]
            if weight in arrays and not weight.startswith(PARAMETER_PREFIXES):
                if len(node.input) > 2 and node.input[2] != f"{module}.bias":
                    raise ValueError(f"Conv {node.name} takes bias {node.input[2]}, expected {module}.bias")
                params[f"{module}.weight"] = arrays[weight]
        elif node.op_type == "Gather" and node.name.endswith("/emb/Gather") and node.input[0] in arrays:
            params[f"{_module_path(node.name)}.weight"] = arrays[node.input[0]]
        for name in node.input:
            if name.endswith(FOLDED_EXP_SUFFIX) and name in arrays:
                folded_exp[_module_path(name)] = arrays[name]

    used = {id(v) for v in params.values()}
    acoustic_config = _acoustic_config(params)
    acoustic = VitsAcoustic(acoustic_config)
    for module, value in folded_exp.items():
        if isinstance(acoustic.get_submodule(module), ElementwiseAffine) and f"{module}.logs" not in params:
            # The affine's inverse multiplies by exp(-logs); undo that folding.
            params[f"{module}.logs"] = -np.log(value)
            used.add(id(value))
    constants = sorted(name for name, value in arrays.items() if id(value) not in used)
    oversized = [name for name in constants if arrays[name].size > 16]
    if oversized:
        raise ValueError(f"unmapped initializers that look like parameters: {oversized}")

    tensors = {name: torch.from_numpy(np.array(value, dtype=np.float32)) for name, value in params.items()}
    decoder_state = {name[len("dec.") :]: value for name, value in tensors.items() if name.startswith("dec.")}
    acoustic_state = {name: value for name, value in tensors.items() if not name.startswith("dec.")}
    return ConvertedVoice(acoustic_config, _decoder_config(decoder_state, convs), acoustic_state, decoder_state, constants)


def _acoustic_config(params: dict[str, np.ndarray]) -> VitsConfig:
    vocab, hidden = params["enc_p.emb.weight"].shape
    n_layers = len({name.split(".")[3] for name in params if name.startswith("enc_p.encoder.attn_layers.")})
    filter_channels, _, kernel_size = params["enc_p.encoder.ffn_layers.0.conv_1.weight"].shape
    n_heads_channels = params["enc_p.encoder.attn_layers.0.emb_rel_k"].shape
    window_size = (n_heads_channels[1] - 1) // 2
    inter = params["enc_p.proj.weight"].shape[0] // 2
    n_speakers, gin = params["emb_g.weight"].shape if "emb_g.weight" in params else (1, 0)
    flow_layers = sorted({int(name.split(".")[2]) for name in params if name.startswith("flow.flows.")})
    wn_layers = {name.split(".")[5] for name in params if name.startswith("flow.flows.0.enc.in_layers.")}
    stochastic = "dp.flows.0.m" in params
    return VitsConfig(
        n_vocab=int(vocab),
        inter_channels=int(inter),
        hidden_channels=int(hidden),
        filter_channels=int(filter_channels),
        n_heads=int(hidden // n_heads_channels[2]),
        n_layers=n_layers,
        kernel_size=int(kernel_size),
        window_size=int(window_size),
        duration_predictor="stochastic" if stochastic else "deterministic",
        dp_filter_channels=int(params["dp.conv_1.weight"].shape[0]) if not stochastic else 256,
        flow_n_flows=len(flow_layers),
        flow_kernel_size=int(params["flow.flows.0.enc.in_layers.0.weight"].shape[-1]),
        flow_n_layers=len(wn_layers),
        n_speakers=int(n_speakers),
        gin_channels=int(gin),
    )


def _decoder_config(state: dict[str, torch.Tensor], convs: dict[str, dict[str, list[int]]]) -> GeneratorConfig:
    stages = len({name.split(".")[1] for name in state if name.startswith("ups.")})
    blocks = len({name.split(".")[1] for name in state if name.startswith("resblocks.")})
    per_stage = blocks // stages
    resblock = "1" if any(".convs1." in name for name in state) else "2"
    first_convs = "convs1" if resblock == "1" else "convs"
    kernel_sizes, dilations = [], []
    for block in range(per_stage):
        layer_count = len({name.split(".")[3] for name in state if name.startswith(f"resblocks.{block}.{first_convs}.")})
        attrs = [convs[f"dec.resblocks.{block}.{first_convs}.{layer}"] for layer in range(layer_count)]
        kernel_sizes.append(attrs[0]["kernel_shape"][0])
        dilations.append(tuple(a["dilations"][0] for a in attrs))
    return GeneratorConfig(
        resblock=resblock,
        upsample_rates=tuple(convs[f"dec.ups.{i}"]["strides"][0] for i in range(stages)),
        upsample_kernel_sizes=tuple(int(state[f"ups.{i}.weight"].shape[-1]) for i in range(stages)),
        upsample_initial_channel=int(state["conv_pre.weight"].shape[0]),
        resblock_kernel_sizes=tuple(kernel_sizes),
        resblock_dilation_sizes=tuple(dilations),
        in_channels=int(state["conv_pre.weight"].shape[1]),
        io_weight_norm=False,
        post_bias="conv_post.bias" in state,
        gin_channels=int(state["cond.weight"].shape[1]) if "cond.weight" in state else 0,
    )


def build_models(
    acoustic_config: VitsConfig,
    decoder_config: GeneratorConfig,
    acoustic_state: dict[str, torch.Tensor],
    decoder_state: dict[str, torch.Tensor],
) -> tuple[VitsAcoustic, Generator]:
    """Instantiate both modules, fold weight norm, load the weights and check nothing is missing."""
    acoustic = VitsAcoustic(acoustic_config)
    acoustic.remove_weight_norm()
    result = acoustic.load_state_dict(acoustic_state, strict=False)
    missing = [key for key in result.missing_keys if not key.startswith(INFERENCE_UNUSED_PREFIXES)]
    if missing or result.unexpected_keys:
        raise ValueError(f"voice weights do not fit the model: missing {missing}, unexpected {result.unexpected_keys}")
    decoder = Generator(decoder_config)
    decoder.remove_weight_norm()
    decoder.load_state_dict(decoder_state)
    return acoustic.eval(), decoder.eval()


def read_voice_config(config_path: str | Path) -> PiperVoiceConfig:
    """A Piper voice's `.onnx.json` config (no model loaded)."""
    return PiperVoiceConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8")))


def load_piper_voice(onnx_path: str | Path, config_path: str | Path | None = None, cache_dir: str | Path | None = None) -> PiperVoiceModels:
    """Load a Piper voice as torch modules.

    The first load converts the ONNX file and saves the converted weights under `cache_dir`
    (default `default_cache_dir()`), keyed by the file's sha256; later loads read only that file.
    `config_path` defaults to the .onnx path + ".json".
    """
    onnx_path = Path(onnx_path)
    config_path = Path(config_path) if config_path else onnx_path.with_name(onnx_path.name + ".json")
    voice_config = read_voice_config(config_path)
    sha = file_sha256(onnx_path)
    cache_file = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    cache_file = cache_file / f"piper-{sha}.v{CACHE_FORMAT_VERSION}.pt"

    if cache_file.exists():
        cached = torch.load(cache_file, map_location="cpu", weights_only=True)
        acoustic, decoder = build_models(
            VitsConfig.from_dict(cached["acoustic_config"]),
            GeneratorConfig.from_dict(cached["decoder_config"]),
            cached["acoustic"],
            cached["decoder"],
        )
        return PiperVoiceModels(acoustic, decoder, voice_config, sha, loaded_from_cache=True)

    converted = convert_piper_onnx(onnx_path)
    acoustic, decoder = build_models(
        converted.acoustic_config, converted.decoder_config, converted.acoustic_state, converted.decoder_state
    )
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a crash or a concurrent loader never sees half a file.
    partial = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.partial")
    torch.save(
        {
            "format_version": CACHE_FORMAT_VERSION,
            "acoustic_config": converted.acoustic_config.to_dict(),
            "decoder_config": converted.decoder_config.to_dict(),
            "acoustic": converted.acoustic_state,
            "decoder": converted.decoder_state,
        },
        partial,
    )
    os.replace(partial, cache_file)
    return PiperVoiceModels(acoustic, decoder, voice_config, sha)


LATENT_OUTPUT: Final = "latent_z"


@lru_cache(maxsize=4)
def _latent_session(onnx_path: str, num_threads: int):
    """An onnxruntime session of the voice with the decoder's input z added as a second output."""
    import onnx
    import onnxruntime

    model = onnx.load(onnx_path)
    conv_pre = next(node for node in model.graph.node if node.op_type == "Conv" and node.input[1] == "dec.conv_pre.weight")
    identity = onnx.helper.make_node("Identity", [conv_pre.input[0]], [LATENT_OUTPUT], name="/latent_z/Identity")
    model.graph.node.append(identity)
    model.graph.output.append(onnx.helper.make_tensor_value_info(LATENT_OUTPUT, onnx.TensorProto.FLOAT, None))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session, {i.name for i in session.get_inputs()}


def onnx_latent_and_audio(
    onnx_path: str | Path,
    phoneme_ids: list[int] | np.ndarray,
    scales: tuple[float, float, float],
    *,
    speaker_id: int | None = None,
    num_threads: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the original ONNX voice: (latent z [1, 192, frames], audio [samples]) for one sentence.

    `scales` is (noise_scale, length_scale, noise_w), as Piper passes them. Note the graph draws its
    own noise, so only noise_scale = noise_w = 0 is repeatable.
    """
    session, input_names = _latent_session(str(Path(onnx_path).resolve()), num_threads)
    ids = np.asarray(phoneme_ids, dtype=np.int64).reshape(1, -1)
    feeds = {
        "input": ids,
        "input_lengths": np.array([ids.shape[1]], dtype=np.int64),
        "scales": np.asarray(scales, dtype=np.float32),
    }
    if "sid" in input_names:
        feeds["sid"] = np.array([speaker_id or 0], dtype=np.int64)
    audio, z = session.run(["output", LATENT_OUTPUT], feeds)
    return z, audio.reshape(-1)
