"""The sentences of one stream that its pipeline has taken from the text side and not yet made whole.

A streamed text's unfinished sentence is spoken as it stands once it has waited `sentence_wait_s`
for its end (libs.synthesis.text_side), so that a client whose text stops does not leave its
listener in silence. While the audio before it is still being made, cutting it would not let the
listener hear it any sooner: it would only break a sentence that may yet end. So the text side
holds it until the pipeline has made everything it took, which on a slow or busy machine can be
well past the wait, and its wait starts only then: the listener is still hearing that audio, and a
client that sends the rest of its sentence on hearing the one before keeps it whole.
"""

from __future__ import annotations

import asyncio


class SentencesInFlight:
    """Counts the sentences a pipeline has taken and not yet made whole; `made_all` is set while it
    has none. One per stream, on one event loop."""

    def __init__(self) -> None:
        self._count = 0
        self.made_all = asyncio.Event()
        self.made_all.set()

    @property
    def busy(self) -> bool:
        """Whether some audio the stream has taken text for is still being made."""
        return self._count > 0

    def taken(self) -> None:
        """The pipeline took one more sentence."""
        self._count += 1
        self.made_all.clear()

    def made(self) -> None:
        """One sentence's last samples are made."""
        if self._count == 0:
            raise RuntimeError("made() without taken()")
        self._count -= 1
        if self._count == 0:
            self.made_all.set()
