"""What a listener that holds only its first step's audio waits on next, on the default voice's vocoder:
its second step whole (not the schedule's longest), then each later step with the audio of the ones
between (`VocoderEngine.start_waits`, which the vocoder's `WorkerLoad.piece_lead_ms` is made of)."""

from __future__ import annotations

import pytest

from libs.voice.engine import VocoderEngine


def test_the_next_steps_come_with_the_audio_of_those_between() -> None:
    engine = VocoderEngine.load_default()
    waits = engine.start_waits()
    widths = [engine.schedule.chunk_frames(index) for index in range(1, len(waits) + 1)]
    assert [frames for frames, _ in waits] == widths == [32, 64, 128]
    frame_s = engine.hop_length / engine.sample_rate_hz
    assert [given for _, given in waits] == pytest.approx([0.0, 32 * frame_s, 96 * frame_s])
    assert waits[-1][0] == engine.schedule.max_chunk_frames  # later steps are no wider, with more audio given
