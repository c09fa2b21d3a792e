"""Bounds on what crosses processes: the fields a worker takes from the wire, and the messages.

Workers check every request against these (libs.voice.checks, libs.voice.vocode_session) and answer
INVALID_ARGUMENT past them; the gateway keeps its own messages inside them (it cuts a cached
sentence into VocodeRequests of at most `MAX_FRAMES_PER_MESSAGE` frames), and the servers' and
channels' message-size limits (libs.serving.server) are sized from them. Each bound sits well above
the largest value real traffic produces, and below what would hurt a process that accepts it.
"""

from __future__ import annotations

from typing import Final

MAX_PHONEME_IDS: Final = 2_048
"""Phoneme ids in one sentence. The text encoder attends over all of them, so time and memory grow
with their square; at this bound one sentence sent straight to a worker plans in about a second and
keeps the worker well inside its memory (`make bench-hostile` sends one; twice the bound did not).
The gateway's text side cuts sentences far shorter (libs.text.long_sentences, 400 by default); a
1,000-character chunk of prose uncut is about 2,000 ids."""
MAX_SENTENCE_FRAMES: Final = 65_536
"""Mel frames in one sentence: 12.7 minutes at 22,050 Hz and a hop of 256. A 1,000-character chunk
of prose at the slowest speed (0.25) lasts about 5 minutes."""
MAX_FRAMES_PER_MESSAGE: Final = 2_048
"""Mel frames the gateway puts in one VocodeRequest: more than the acoustic worker's largest chunk
(1,024 frames and the flow's lag, libs.voice.chunking), so a forwarded chunk stays one message; a
cached or resumed sentence goes in several."""
MAX_SLICE_FRAMES: Final = 1_024
"""Frames in one MelSlice (a 40 ms slice holds 3 or 4)."""
MAX_ID_CHARS: Final = 128
"""Characters of an utterance id (the client's request_id, or a generated 32-character one)."""
MAX_NAME_CHARS: Final = 256
"""Characters of a voice name or model version a worker compares with its own."""
MEL_VALUE_LIMIT: Final = 32.0
"""Largest magnitude of a log-mel value. The mel recipe's floor is ln(1e-5) = -11.5 and speech
peaks near +3; anything past ±32 (e^32) is not a mel."""

# Messages, each measured at the bounds above (tests/unit/test_wire_limits.py). A message over its
# receiver's limit is refused by gRPC itself with RESOURCE_EXHAUSTED, before any Python sees it.
MAX_GATEWAY_REQUEST_BYTES: Final = 32 * 1024
"""A client's request: 5,000 characters are at most 20,000 bytes of UTF-8, and the other fields
(voice, a request id of 128 characters) a few hundred more."""
MAX_SENTENCE_REQUEST_BYTES: Final = 16 * 1024
"""A SentenceRequest: `MAX_PHONEME_IDS` ids of up to two bytes each (4 KiB) and a few short strings."""
MAX_WORKER_MESSAGE_BYTES: Final = 1024 * 1024
"""Any other message between the gateway and a worker: the gateway's VocodeRequest of
`MAX_FRAMES_PER_MESSAGE` float16 frames with a sentence's alignment and the longest utterance id on
every slice is 0.67 MiB, an acoustic worker's answer of one chunk in float32 0.55 MiB, a vocoder's
answer of one step 0.17 MiB."""
MAX_RESPONSE_BYTES: Final = 4 * 1024 * 1024
"""Any message a service sends: a client's piece of audio (one vocoding step at 48 kHz in float32)
with its sentence's text, phonemes and alignment is under 0.5 MiB."""
