"""Metadata the workers and the gateway exchange beyond the messages themselves."""

from __future__ import annotations

from typing import Final

STREAM_ACCEPTED_METADATA: Final = ("tts-stream-accepted", "1")
"""The header a worker sends when it admits a stream. A refusal ends the call with headers too (a
trailers-only response), a moment before the call reads as done: the gateway tells the two apart by
this header, not by timing."""
MODEL_VERSION_METADATA_KEY: Final = "tts-model-version"
"""Header a worker sends with STREAM_ACCEPTED_METADATA: the model version the stream will run on
(the gateway only reuses cached audio made by that very model)."""
STREAM_LIMIT_METADATA_KEY: Final = "tts-stream-limit"
"""Header a worker sends with STREAM_ACCEPTED_METADATA: how many streams it takes at once ("0": no
limit of its own)."""
GATEWAY_METADATA_KEY: Final = "tts-gateway"
"""Header a gateway sends when it opens a worker stream: its id, so a worker can say how many of its
streams each gateway holds (`WorkerLoad.open_streams_by_gateway`)."""
VOICE_METADATA_KEY: Final = "tts-voice"
"""Header a gateway sends when it opens a worker stream: the voice the stream speaks (none: the
worker's default voice). The worker loads that voice before it accepts the stream."""
SPEAKER_METADATA_KEY: Final = "tts-speaker-id"
"""Header a gateway sends when it opens a vocoder stream of a multi-speaker voice: the speaker's id
(none: speaker 0). A speaker-conditioned decoder needs it; the mel alone does not say."""
FAST_MODEL_VERSION_METADATA_KEY: Final = "tts-fast-model-version"
"""Header a vocoder sends when it admits a stream of a voice with a fast tier: that tier's model version
(tts-model-version is the quality tier's), so the gateway knows which cached audio heads each tier's
sentences may start with."""
TIER_METADATA_KEY: Final = "tts-tier"
"""Header a gateway sends when it opens a vocoder stream: the tier of the voice it speaks in (none:
quality; libs.voice.tiers). The gateway sends the same header to its clients: the tier a stream was
spoken in."""
LISTENING_METADATA: Final = ("tts-listening", "1")
"""Header a gateway sends when it opens a worker stream for an utterance whose listener already has
audio of it (a cached first sentence, or a stream moved to another worker). The gateway admitted the
stream; a worker admits it past its real-time checks, because refusing it would cut the listener off
mid-utterance, not keep work away (the hard limits still apply)."""
ANNOUNCES_END_METADATA: Final = ("tts-announces-end", "1")
"""Header a gateway sends when it opens a worker stream: it marks its last request `end` before it
half-closes. Requests that end without one then mean the gateway went away (it cancelled the call,
or failed): the worker stops the stream at once and counts it cancelled, where for another caller it
first waits a moment for a cancellation that may be on its way."""
PUSHBACK_METADATA_KEY: Final = "grpc-retry-pushback-ms"
"""Trailing metadata key a worker sets to say how long to wait (milliseconds) or, if negative, not to retry."""
