"""A blocking client for the mesh's public gRPC API (`tts.v1.TextToSpeech`).

    from tts_mesh import TextToSpeechClient
    with TextToSpeechClient("127.0.0.1:50051") as client:
        with open("hello.opus", "wb") as out:
            for response in client.synthesize("Hello there.", encoding="ogg_opus"):
                out.write(response.audio)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.voice.tiers import tier_enum

ENCODINGS_BY_NAME: Final = {
    "pcm": tts_pb2.LINEAR_PCM,
    "float_pcm": tts_pb2.FLOAT_PCM,
    "ogg_opus": tts_pb2.OGG_OPUS,
    "opus": tts_pb2.OGG_OPUS,
    "mp3": tts_pb2.MP3,
    "aac": tts_pb2.AAC,
    "flac": tts_pb2.FLAC,
    "wav": tts_pb2.WAV,
    "mulaw": tts_pb2.MULAW,
    "alaw": tts_pb2.ALAW,
}
"""Encodings by the names the command line and file extensions use."""
_EXTENSIONS: Final = {
    ".wav": "wav", ".opus": "ogg_opus", ".ogg": "ogg_opus", ".mp3": "mp3", ".aac": "aac", ".flac": "flac",
    ".ulaw": "mulaw", ".mulaw": "mulaw", ".alaw": "alaw", ".pcm": "pcm", ".raw": "pcm", ".f32": "float_pcm",
}  # fmt: skip


def encoding_for_path(path: str | Path) -> str:
    """The encoding a file name asks for by its extension ("wav" when it says nothing we know)."""
    return _EXTENSIONS.get(Path(path).suffix.lower(), "wav")


def encoding_value(encoding: str | int) -> int:
    """An AudioEncoding value from a name ("ogg_opus", "mp3", ...) or a value."""
    if isinstance(encoding, int):
        return encoding
    try:
        return ENCODINGS_BY_NAME[encoding.lower()]
    except KeyError:
        raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS_BY_NAME)}") from None


class TextToSpeechClient:
    """One channel to a gateway (or the edge in front of it)."""

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        *,
        api_key: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float | None = None,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        """How long a first call waits for the service to answer at all (ConnectionError past it);
        None: a call waits for it as long as its own timeout (a service still starting is waited for)."""
        self._reached = connect_timeout_s is None
        if tls or root_certificates is not None:
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates))
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = tts_pb2_grpc.TextToSpeechStub(self._channel)
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()

    def synthesize(
        self,
        text: str,
        *,
        voice: str = "",
        speed: float = 1.0,
        encoding: str | int = "pcm",
        sample_rate_hz: int = 0,
        include_alignment: bool = False,
        tier: str = "",
    ) -> Iterator[tts_pb2.SynthesizeResponse]:
        """The responses of one Synthesize call, as they arrive (grpc.RpcError on failure); `tier` is
        quality, fast or auto ("": the key's default, else quality)."""
        request = tts_pb2.SynthesizeRequest(
            text=text,
            voice=voice,
            speed=speed,
            encoding=encoding_value(encoding),
            sample_rate_hz=sample_rate_hz,
            include_alignment=include_alignment,
            tier=tier_enum(tier) if tier else tts_pb2.TIER_UNSPECIFIED,
        )
        self._reach()
        return self._stub.Synthesize(request, timeout=self.timeout_s, metadata=self._metadata, wait_for_ready=True)

    def voices(self, language_code: str = "") -> list[tts_pb2.Voice]:
        """The voices the service speaks, optionally only those of a language (e.g. "en")."""
        self._reach()
        reply = self._stub.ListVoices(
            tts_pb2.ListVoicesRequest(language_code=language_code), timeout=30.0, metadata=self._metadata, wait_for_ready=True
        )
        return list(reply.voices)

    def _reach(self) -> None:
        if self._reached:
            return
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.connect_timeout_s)
        except grpc.FutureTimeoutError:
            raise ConnectionError(f"nothing answers at {self.address} within {self.connect_timeout_s:g} s") from None
        self._reached = True

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> TextToSpeechClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
