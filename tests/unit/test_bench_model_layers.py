"""How `make bench-quality`'s layer table groups onnxruntime's profile (by text-encoder layer, else
"other"), and the matrix-product form its int8 rows quantise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.model_layers import ProductConv, layer_of, node_times


def test_a_node_belongs_to_its_text_encoder_layer_or_to_the_rest() -> None:
    assert layer_of("/encoder/encoder/encoder/ffn_layers.5/conv_1/Conv") == "ffn_layers.5"
    assert layer_of("/encoder/encoder/encoder/attn_layers.0/conv_k/Conv") == "attn_layers.0"
    assert layer_of("/encoder/encoder/proj/Conv") == "other"
    assert layer_of("/flows.3/convs/convs_1x1.0/Conv") == "other"


def test_node_times_sum_each_groups_kernel_time_and_leave_out_what_the_grouping_drops(tmp_path: Path) -> None:
    events = [
        {"cat": "Node", "name": "/dec/ups.0/ConvTranspose_kernel_time", "dur": 70},
        {"cat": "Node", "name": "/dec/ups.1/ConvTranspose_kernel_time", "dur": 30},
        {"cat": "Node", "name": "/flow/flows.0/Conv_kernel_time", "dur": 25},
        {"cat": "Node", "name": "/dec/ups.0/ConvTranspose_fence_before", "dur": 999},  # not a kernel's time
        {"cat": "Session", "name": "model_run", "dur": 5000},
        {"cat": "Node", "name": "Unsqueeze_11_kernel_time", "dur": 3},  # outside every part
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(events))
    times = node_times(str(profile), lambda node: {"dec": "decoder", "flow": "flow"}.get(node.strip("/").split("/")[0]))
    assert times == {"decoder": 100, "flow": 25}


def test_a_convolution_as_a_product_gives_its_numbers() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(8, 12, 3)
    padded = torch.nn.functional.pad(torch.randn(2, 8, 17), (1, 1))
    torch.testing.assert_close(ProductConv(conv)(padded), conv(padded), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="plain product"):
        ProductConv(torch.nn.Conv1d(8, 12, 3, padding=1))
