"""The fast tier's trainer: seeded, checkpointed, and a run that stops goes on from its checkpoint to
the very weights an unbroken run reaches, as does a finished run given one more cosine cycle. Teacher pairs here are random stand-ins (structure only;
the student's quality is measured by `python -m scripts.voice.fast_tier --evaluate`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from libs.models.hifigan import Generator
from libs.models.mel_bridge import MelVocoder
from scripts.voice.fast_tier import STUDENT, FastTierConfig, StageHints, train
from tests.support.signals import gliding_voice

SMALL = FastTierConfig(
    model=replace(STUDENT, upsample_initial_channel=16),
    batch_size=2,
    segment_frames=8,
    context_frames=4,
    steps=4,
    restarts=(),
    hint_weight=0.0,
)
EXTENDED = replace(SMALL, restarts=((3, 5e-4),))


def _work_dir(tmp_path: Path, config: FastTierConfig) -> Path:
    generator = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(80, 40, generator=generator), torch.randn(40 * 256, generator=generator) * 0.1) for _ in range(3)]
    work_dir = tmp_path / "work"
    work_dir.mkdir(parents=True)
    torch.save(pairs, work_dir / f"quality-targets-{config.teacher.variants_per_sentence}-{config.teacher.seed}.pt")
    return work_dir


def test_a_stopped_run_resumes_from_its_checkpoint_to_the_weights_of_an_unbroken_one(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    unbroken = train(SMALL, _work_dir(tmp_path / "a", SMALL), log=lambda line: None).state_dict()
    stopped_dir = _work_dir(tmp_path / "b", SMALL)
    train(SMALL, stopped_dir, log=lambda line: None, until_step=2)  # one sitting ends at step 2
    said: list[str] = []
    resumed = train(SMALL, stopped_dir, log=said.append).state_dict()
    assert "resumed at step 2" in said
    assert all(torch.equal(unbroken[name], resumed[name]) for name in unbroken)


def test_the_committed_checkpoint_is_on_the_committed_schedule() -> None:
    """`make voice-fast` goes on from (here: finds finished) the checkpoint committed with the student:
    the hints' run, which a checkpoint without hints (from before they were added, or off) is not."""
    from libs.voice.assets import default_voice_assets
    from scripts.voice.fast_tier import CHECKPOINT_FILE

    state = torch.load(default_voice_assets().trained_dir / CHECKPOINT_FILE, weights_only=False)
    assert FastTierConfig().goes_on_from(state["config"]) and state["step"] == FastTierConfig().total_steps
    assert FastTierConfig().hint_weight == 5.0 and "projections" in state
    assert not replace(FastTierConfig(), hint_weight=0.0).goes_on_from(state["config"])
    before_hints = {key: value for key, value in state["config"].items() if key != "hint_weight"}
    assert not FastTierConfig().goes_on_from(before_hints), "a checkpoint from before the hints trained without them"


def test_the_trainer_keeps_a_run_in_the_checkpoint_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--checkpoint` names where a run is kept (and goes on from); without it, the installed student's run."""
    import scripts.voice.fast_tier as fast_tier
    from libs.voice.assets import default_voice_assets

    runs: list[tuple[float, Path | None]] = []

    def record(config: FastTierConfig, work_dir: Path, until_step: int | None = None, checkpoint: Path | None = None) -> Generator:
        runs.append((config.hint_weight, checkpoint))
        return Generator(SMALL.model)

    threads = torch.get_num_threads()
    monkeypatch.setattr(fast_tier, "train", record)
    try:
        fast_tier.main(["--hint-weight", "1", "--threads", "1", "--checkpoint", str(tmp_path / "hints.pt")])
        fast_tier.main(["--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    assert runs == [(1.0, tmp_path / "hints.pt"), (5.0, default_voice_assets().trained_dir / fast_tier.CHECKPOINT_FILE)]


def _stand_in_teacher() -> MelVocoder:
    """A quality tier of the student's stages at twice its width (random weights): hints need only its shape."""
    torch.manual_seed(1)
    return MelVocoder(None, Generator(replace(SMALL.model, upsample_initial_channel=32))).eval()


def test_a_run_with_stage_hints_resumes_to_the_weights_of_an_unbroken_one(tmp_path: Path) -> None:
    """The hints' projections are trained with the student: a resumed run takes them from the checkpoint."""
    torch.set_num_threads(1)
    config = replace(SMALL, hint_weight=5.0)
    unbroken = train(config, _work_dir(tmp_path / "a", config), log=lambda line: None, teacher=_stand_in_teacher()).state_dict()
    stopped_dir = _work_dir(tmp_path / "b", config)
    train(config, stopped_dir, log=lambda line: None, until_step=2, teacher=_stand_in_teacher())
    said: list[str] = []
    resumed = train(config, stopped_dir, log=said.append, teacher=_stand_in_teacher()).state_dict()
    assert "resumed at step 2" in said and " hints " in said[-1]
    assert all(torch.equal(unbroken[name], resumed[name]) for name in unbroken)
    without = train(SMALL, _work_dir(tmp_path / "c", SMALL), log=lambda line: None).state_dict()
    assert not all(torch.equal(unbroken[name], without[name]) for name in unbroken), "the hints change what the student learns"


def test_stage_hints_pull_the_students_stages_toward_the_teachers() -> None:
    """Trained on the hints alone, the relative L1 between the projected student stages and the teacher's falls."""
    torch.manual_seed(0)
    hints = StageHints(SMALL.model, _stand_in_teacher())
    student = Generator(SMALL.model)
    mel = torch.randn(2, 80, 16)
    optimiser = torch.optim.Adam([*student.parameters(), *hints.projections.parameters()], lr=3e-3)
    losses = []
    for _ in range(60):
        stages, _ = student.forward_stages(mel)
        loss = sum(hints(stages, mel, (4, 12)))
        losses.append(float(loss.detach()))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert losses[-1] < 0.7 * losses[0]


def test_a_generator_hands_on_each_stage_and_the_same_samples_as_forward() -> None:
    torch.manual_seed(2)
    generator = Generator(SMALL.model).eval()
    mel = torch.randn(2, 80, 10)
    stages, samples = generator.forward_stages(mel)
    assert torch.equal(samples, generator(mel))
    assert [tuple(stage.shape) for stage in stages] == [(2, 8, 80), (2, 4, 640), (2, 2, 2560)]
    with pytest.raises(ValueError, match="upsample as its teacher"):
        StageHints(replace(SMALL.model, upsample_rates=(4, 8, 8)), _stand_in_teacher())


def test_a_finished_run_goes_on_with_one_more_cycle_to_the_weights_of_a_run_that_had_it_from_the_start(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    unbroken = train(EXTENDED, _work_dir(tmp_path / "a", EXTENDED), log=lambda line: None).state_dict()
    finished_dir = _work_dir(tmp_path / "b", SMALL)
    train(SMALL, finished_dir, log=lambda line: None)  # the first schedule, to its end
    said: list[str] = []
    extended = train(EXTENDED, finished_dir, log=said.append).state_dict()
    assert "resumed at step 4" in said and "step 7/7" in said[-1]
    assert all(torch.equal(unbroken[name], extended[name]) for name in unbroken)
    assert EXTENDED.learning_rate_at(4) == 5e-4 and SMALL.learning_rate_at(0) == SMALL.learning_rate
    assert not SMALL.goes_on_from(EXTENDED.to_dict()), "a checkpoint further along another schedule is not this one's"


def test_the_held_out_check_scores_each_text_on_its_own_and_averages_them() -> None:
    """Each text's sentences are joined into one clip and each text is scored alone, as `make
    bench-quality` scores, never one clip of every text (which read the fast tier's gap as half)."""
    from bench.quality import dnsmos_scores
    from scripts.voice.fast_tier import dnsmos_per_text, text_audio

    generator = torch.Generator().manual_seed(3)
    # Here a "mel" only names its audio: a tone of its first value in hertz, half a second per frame, in noise.
    texts = [[torch.full((80, 2), 110.0), torch.full((80, 3), 220.0)], [torch.full((80, 4), 330.0)]]
    noise = torch.randn(22050 * 2, generator=generator) * 0.02

    def vocode(mel: torch.Tensor) -> torch.Tensor:
        time = torch.arange(mel.shape[-1] * 22050 // 2) / 22050
        return 0.3 * torch.sin(2 * torch.pi * float(mel[0, 0, 0]) * time) + noise[: time.numel()]

    def clip(mels: list[torch.Tensor]) -> np.ndarray:
        return np.concatenate([vocode(mel[None]).numpy() for mel in mels])

    by_text = [dnsmos_scores(clip(mels), 22050) for mels in texts]
    joined = dnsmos_scores(clip([mel for mels in texts for mel in mels]), 22050)
    scores = dnsmos_per_text(text_audio(vocode, texts))
    assert scores == pytest.approx(tuple(float(np.mean(column)) for column in zip(*by_text, strict=True)))
    assert scores[0] != pytest.approx(joined[0])


def test_periodicity_at_one_hop_tells_a_buzz_at_the_frame_rate_from_speech_like_audio() -> None:
    from scripts.voice.fast_tier import hop_periodicity, periodicity_at, text_audio

    rng = np.random.default_rng(5)
    frame = rng.normal(size=256)
    buzz = np.tile(frame, 40)  # the same waveform every frame: a buzz at the frame rate
    voiced = gliding_voice(100.0, 160.0, 40 * 256)  # a pitch of its own, not the frames'
    assert periodicity_at(buzz, 256) == pytest.approx(39 / 40)  # all but the last frame has its like one hop on
    assert abs(periodicity_at(voiced, 256)) < 0.5
    assert abs(periodicity_at(rng.normal(size=40 * 256), 256)) < 0.05
    assert periodicity_at(np.zeros(1000), 256) == 0.0
    texts = [[torch.zeros(80, 20)], [torch.zeros(80, 20), torch.zeros(80, 20)]]
    # Each text's sentences are joined: 20 and 40 frames of the same waveform.
    clips = text_audio(lambda mel: torch.from_numpy(np.tile(frame, mel.shape[-1])), texts)
    assert hop_periodicity(clips, 256) == pytest.approx((19 / 20 + 39 / 40) / 2)
