"""Everything one worker schedules its model steps with: the executor, the cost model, the capacity,
and the runner that ties them together; and what the worker tells its gateways about its load."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor

from libs.pb.tts.common.v1 import load_pb2
from libs.scheduling.calibration import Calibration, calibrate
from libs.scheduling.capacity import SharedCapacity
from libs.scheduling.costs import FIRST_AUDIO_LANE, CostModel
from libs.scheduling.executor import DeadlineExecutor
from libs.scheduling.runner import StepRunner
from libs.scheduling.stream import VocoderPacing
from libs.telemetry.metrics import WorkerMetrics
from libs.voice.calibration import STAGE_CHUNK, STAGE_PLAN, CalibrationStep

_log = logging.getLogger(__name__)

STAGES = {"acoustic": (STAGE_PLAN, STAGE_CHUNK), "vocoder": (STAGE_CHUNK,)}
"""The cost model's stages of each worker kind."""


class Scheduler:
    """One worker's scheduling parts."""

    def __init__(
        self,
        kind: str,
        executor: Executor,
        metrics: WorkerMetrics,
        capacity: SharedCapacity | None = None,
        batched: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kind = kind
        self.executor = executor
        self.capacity = capacity or SharedCapacity(kind)
        self.costs = CostModel(STAGES[kind], self.capacity.budget.cores)
        self.runner = StepRunner(executor, metrics, self.costs, batched)
        self.pacing: VocoderPacing | None = None
        """A vocoder's pacing, once its engine is loaded (libs.scheduling.stream.VocoderPacing)."""
        self.longest_step_units = 0
        """Frames of the longest chunk step of this worker's schedule (what its step lead is quoted for)."""
        self.first_step_units = 0
        """Frames of a sentence's first chunk step (an acoustic worker's first chunk takes the flow's lag too)."""
        self.start_waits: list[tuple[int, float]] = []
        """The steps a listener that holds only its first step's audio waits on in turn, each with the
        audio the steps between give it meanwhile (a vocoder's `VocoderEngine.start_waits`: frames,
        seconds); empty: not known."""
        self._starting: set[object] = set()

    def stream_starting(self, stream: object, starting: bool) -> None:
        """Whether `stream`'s listener is still in its first seconds of audio (see `steps_in_parts`);
        False once the stream has ended."""
        if starting:
            self._starting.add(stream)
        else:
            self._starting.discard(stream)

    def steps_in_parts(self, open_streams: int) -> bool:
        """Whether every stream's steps should run a part at a time now, with `open_streams` streams open
        on this worker: while more than one is and one of them is in its first seconds. A whole step
        holds a core for its length whatever comes after it starts, and a starting listener holds so
        little audio that its next step cannot wait that long (libs.serving.vocoder_work)."""
        return open_streams > 1 and bool(self._starting)

    def calibrate(self, workload: Callable[[], Iterable[CalibrationStep]]) -> Calibration:
        """Measure the costs on as many threads at once as the budget has cores (run it off the event loop)."""
        lanes = getattr(self.executor, "threads", 1) + getattr(self.executor, "urgent_threads", 0)
        threads = max(1, min(math.ceil(self.capacity.budget.cores), lanes))
        result = calibrate(self.costs, self.capacity.cost, workload, threads)
        self.capacity.publish()
        _log.info("calibrated costs: %s", self.describe())
        return result

    def produced(self, audio_s: float) -> None:
        """The worker made `audio_s` of a listener's audio."""
        if self.capacity.produced(audio_s):
            _log.info("costs now: %s; %.4f CPU s per audio s, capacity %.1f listeners", self.describe(), self.capacity.cost.cpu_s_per_audio_s, self.capacity.streams())

    def describe(self) -> str:
        """The cost model in a line, for the log."""
        parts = [
            f"{stage} {cost.fixed_s * 1000:.2f} ms + {cost.per_unit_s * 1000:.4f} ms/unit (sd {cost.relative_sd:.2f})"
            for stage, cost in self.costs.stages.items()
        ]
        parts += [f"{lane} lane stretch {contention.mean:.2f} (high {contention.high:.2f})" for lane, contention in self.costs.lanes.items()]
        return ", ".join(parts)

    def behind_s(self) -> float:
        """How late the most urgent waiting step already is for its start (0: none is)."""
        return self.executor.lateness_s() if isinstance(self.executor, DeadlineExecutor) else 0.0

    def step_lead_s(self) -> float:
        """Wall seconds this worker's longest step takes now, nearly always (0: not known)."""
        return self.costs.wall_s(STAGE_CHUNK, self.longest_step_units) if self.longest_step_units else 0.0

    def piece_lead_s(self) -> float:
        """How long a listener alone that holds only its first step's audio may wait for more, now,
        nearly always: the most by which one of its next steps takes longer than the audio the steps
        between give it (`start_waits`; 0: not known, and the gateway then takes the step lead)."""
        return max((self.costs.wall_s(STAGE_CHUNK, frames) - given_s for frames, given_s in self.start_waits), default=0.0)

    def load(self, by_gateway: Mapping[str, int], pinned_capacity: float = 0.0) -> load_pb2.WorkerLoad:
        """What this worker can take on now, with `by_gateway` its open streams per gateway id
        (`pinned_capacity`: a capacity set by the operator)."""
        costs = self.costs
        load = load_pb2.WorkerLoad(
            capacity_streams=pinned_capacity or self.capacity.streams(),
            open_streams=sum(by_gateway.values()),
            open_streams_by_gateway=by_gateway,
            cpu_s_per_audio_s=self.capacity.cost.cpu_s_per_audio_s,
            budget_cores=self.capacity.budget.cores,
            step_lead_ms=1000.0 * self.step_lead_s(),
            piece_lead_ms=1000.0 * self.piece_lead_s(),
            queued_cpu_s=getattr(self.executor, "queued_cpu_s", 0.0),
        )
        if self.first_step_units and costs.stages[STAGE_CHUNK].observations:
            load.first_step_ms = 1000.0 * costs.wall_s(STAGE_CHUNK, self.first_step_units, FIRST_AUDIO_LANE)
        if self.kind == "acoustic" and costs.calibrated:
            # A first sentence's plan runs on the first-audio lane: its stretch is the one that counts.
            plan = costs.stages[STAGE_PLAN]
            stretch = costs.wall_s(STAGE_PLAN, 1.0, FIRST_AUDIO_LANE) / max(plan.predict(1.0), 1e-12)
            load.plan_fixed_ms = 1000.0 * plan.fixed_s * stretch
            load.plan_per_id_ms = 1000.0 * plan.per_unit_s * stretch

        if self.pacing is not None:
            schedule = self.pacing.schedule
            load.pacing.CopyFrom(
                load_pb2.VocoderPacing(
                    lag_frames=self.pacing.lag_frames,
                    first_step_frames=schedule.first_chunk_frames,
                    step_growth=schedule.growth,
                    max_step_frames=schedule.max_chunk_frames,
                    first_steps=schedule.first_chunks,
                )
            )
        return load

    def close(self) -> None:
        """Leave the ledger (at shutdown)."""
        self.capacity.close()
