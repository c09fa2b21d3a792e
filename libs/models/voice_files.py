"""The names of the files a built voice's folder holds beside its Piper model. A module of its own, with
no torch, so that whatever only looks for these files (the gateway's catalogue) never loads torch."""

from __future__ import annotations

from typing import Final

MEL_HEAD_FILE: Final = "mel_head.pt"
"""The trained latent -> mel head."""
MEL_ADAPTER_FILE: Final = "mel_adapter.pt"
"""The trained mel -> latent adapter in front of the decoder."""
DECODER_FILE: Final = "decoder.pt"
"""Present only when the voice build tuned decoder layers: the whole decoder state dict."""
