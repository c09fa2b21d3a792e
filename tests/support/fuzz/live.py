"""A structure-aware fuzzer over the raw bytes of every public and internal request, sent to live servers.

Each input is the serialized messages of one call, mutated (tests.support.fuzz.wire_mutations) from a valid
call of one method: tts.v1 Synthesize, StreamingSynthesize and ListVoices at the gateway,
SynthesizeMel and GetModelInfo at the acoustic worker, Vocode at the vocoder worker. The bytes go
over real gRPC connections (a channel's raw method with no serializer) to running processes, and
each answer is judged:

- a **clear status** is any status a client can act on: OK, INVALID_ARGUMENT, NOT_FOUND,
  RESOURCE_EXHAUSTED, FAILED_PRECONDITION, OUT_OF_RANGE, CANCELLED, ...;
- **unclear**: INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED or UNAVAILABLE (a crash's or a bug's signs);
- a **hang**: no answer before the call's deadline (DEADLINE_EXCEEDED), or none long after it;
- a **crash**: a service process that is no longer running.

Every `health_every` inputs, and at the end, each server must still serve a valid call in full.

    python -m tests.support.fuzz.live --seconds 600 --seed random    # `make fuzz`: its own mesh
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
from google.protobuf.descriptor import Descriptor

from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.text.frontend import TextFrontend
from libs.voice.registry import default_registry
from tests.support.fuzz.wire_mutations import Mutator

CLEAR_CODES: Final = frozenset(
    {"OK", "CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
     "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNAUTHENTICATED"}
)  # fmt: skip
DEFAULT_DEADLINE_S: Final = 20.0
"""Time one fuzzed call gets before it counts as a hang: a valid request's first answer takes well
under a second, and two busy cores may be shared with other work."""
LATE_S: Final = 5.0
"""How far past its deadline a call may end before the client itself counts as stuck."""
READ_AFTER_FIRST_S: Final = 1.0
"""How long a call that answers is read before it is cancelled (a valid request may speak for minutes)."""
HEALTH_DEADLINE_S: Final = 60.0
DEFAULT_SEED: Final = 14


@dataclass(frozen=True)
class Target:
    """One method of one server, with the valid calls its inputs are mutated from."""

    service: str
    method: str
    kind: str
    """unary_unary, unary_stream or stream_stream."""
    descriptor: Descriptor
    seeds: Sequence[Sequence[bytes]]
    """Valid calls, each the serialized requests of one call."""
    weight: int = 3

    @property
    def name(self) -> str:
        return f"{self.service} {self.method.rsplit('/', 1)[-1]}"


@dataclass(frozen=True)
class Outcome:
    """How one call ended."""

    code: str
    seconds: float
    responses: int
    details: str = ""


@dataclass
class Finding:
    """An input that broke a rule, with what is needed to send it again."""

    kind: str
    """crash, hang, unclear or unhealthy."""
    target: str
    detail: str
    messages: list[bytes] = field(default_factory=list)

    def describe(self) -> str:
        shown = " | ".join(message[:48].hex() + ("..." if len(message) > 48 else "") for message in self.messages[:4])
        return f"{self.kind} at {self.target}: {self.detail} [{len(self.messages)} messages: {shown}]"


@dataclass
class FuzzReport:
    """What a run sent and what came back."""

    seed: int
    seconds: float = 0.0
    inputs: Counter[str] = field(default_factory=Counter)
    codes: dict[str, Counter[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    health_checks: int = 0

    def count(self, kind: str) -> int:
        return sum(finding.kind == kind for finding in self.findings)

    @property
    def total_inputs(self) -> int:
        return sum(self.inputs.values())

    def summary(self) -> str:
        lines = [
            f"fuzz seed {self.seed}, {self.seconds:.1f} s: {self.total_inputs} inputs, {self.count('crash')} crashes, "
            f"{self.count('hang')} hangs, {self.count('unclear')} unclear statuses, "
            f"{self.count('unhealthy')} failed health calls of {self.health_checks}"
        ]
        for name in sorted(self.inputs):
            codes = ", ".join(f"{code} {count}" for code, count in self.codes[name].most_common())
            lines.append(f"  {name:<26} {self.inputs[name]:>5} inputs: {codes}")
        lines.extend(f"  {finding.describe()}" for finding in self.findings[:20])
        return "\n".join(lines)


def build_targets(channels: Mapping[str, grpc.Channel]) -> list[Target]:
    """Every method with valid calls to mutate from; asks the acoustic worker for a real sentence's mel."""
    voice = default_registry().default
    frontend = TextFrontend(voice.phoneme_id_map(), espeak_voice=voice.espeak_voice)
    sentences = frontend.sentences("Hello there. How are you?")
    info = acoustic_pb2.ModelInfo.FromString(
        channels["acoustic"].unary_unary("/tts.acoustic.v1.Acoustic/GetModelInfo")(b"", timeout=HEALTH_DEADLINE_S)
    )

    def sentence(index: int) -> acoustic_pb2.SentenceRequest:
        return acoustic_pb2.SentenceRequest(
            utterance_id="fuzz", sentence_index=index, phoneme_ids=sentences[index].phoneme_ids, voice=voice.name,
            speed=1.0, noise_scale=voice.noise_scale, noise_w=voice.noise_w, expected_model_version=info.model_version,
            dtype=mel_pb2.MEL_DTYPE_FLOAT16,
        )  # fmt: skip

    mel_answers = channels["acoustic"].stream_stream("/tts.acoustic.v1.Acoustic/SynthesizeMel")(
        iter([sentence(0).SerializeToString()]), timeout=HEALTH_DEADLINE_S
    )
    vocode_seed = [
        vocoder_pb2.VocodeRequest(slices=mel_pb2.MelSlices.FromString(answer).slices).SerializeToString()
        for answer in mel_answers
    ]
    config = tts_pb2.StreamingSynthesizeConfig
    piece = tts_pb2.StreamingSynthesizeRequest
    return [
        Target(
            "gateway",
            "/tts.v1.TextToSpeech/Synthesize",
            "unary_stream",
            tts_pb2.SynthesizeRequest.DESCRIPTOR,
            [
                [tts_pb2.SynthesizeRequest(text="Hello there.").SerializeToString()],
                [
                    tts_pb2.SynthesizeRequest(
                        text="Two short ones. Here.",
                        voice=voice.name,
                        speed=1.5,
                        encoding=tts_pb2.OGG_OPUS,
                        sample_rate_hz=16000,
                        request_id="fuzz-request",
                        include_alignment=True,
                    ).SerializeToString()
                ],
            ],
        ),
        Target(
            "gateway",
            "/tts.v1.TextToSpeech/StreamingSynthesize",
            "stream_stream",
            tts_pb2.StreamingSynthesizeRequest.DESCRIPTOR,
            [
                [piece(config=config()).SerializeToString(), piece(text="Hello there.").SerializeToString()],
                [
                    piece(
                        config=config(voice=voice.name, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000, speed=0.8)
                    ).SerializeToString(),
                    *(piece(text=text).SerializeToString() for text in ("Hello ", "there. And", " a little", " more.")),
                ],
            ],
        ),
        Target(
            "gateway",
            "/tts.v1.TextToSpeech/ListVoices",
            "unary_unary",
            tts_pb2.ListVoicesRequest.DESCRIPTOR,
            [
                [b""],
                [tts_pb2.ListVoicesRequest(language_code="en_US").SerializeToString()],
            ],
            weight=1,
        ),
        Target(
            "acoustic",
            "/tts.acoustic.v1.Acoustic/SynthesizeMel",
            "stream_stream",
            acoustic_pb2.SentenceRequest.DESCRIPTOR,
            [
                [sentence(0).SerializeToString()],
                [sentence(0).SerializeToString(), sentence(1).SerializeToString()],
            ],
        ),
        Target(
            "acoustic",
            "/tts.acoustic.v1.Acoustic/GetModelInfo",
            "unary_unary",
            acoustic_pb2.GetModelInfoRequest.DESCRIPTOR,
            [[b""]],
            weight=1,
        ),
        Target("vocoder", "/tts.vocoder.v1.Vocoder/Vocode", "stream_stream", vocoder_pb2.VocodeRequest.DESCRIPTOR, [vocode_seed]),
    ]


def make_input(target: Target, mutator: Mutator) -> list[bytes]:
    """The messages of one fuzzed call to `target`."""
    rng = mutator.rng
    messages = list(rng.choice(target.seeds))
    if rng.random() < 0.04:  # no structure at all
        return [rng.randbytes(rng.choice((1, 7, 100, 5000))) for _ in range(len(messages))]
    if target.kind == "stream_stream" and rng.random() < 0.2:  # the stream itself out of order
        roll = rng.random()
        if roll < 0.3:
            rng.shuffle(messages)
        elif roll < 0.6 and len(messages) > 1:
            del messages[rng.randrange(len(messages))]
        else:
            position = rng.randrange(len(messages))
            messages[position:position] = [messages[position]] * rng.choice((2, 10, 200))
    chosen = {rng.randrange(len(messages))} | {i for i in range(len(messages)) if rng.random() < 0.15}
    for index in sorted(chosen):
        messages[index] = mutator.mutate(target.descriptor, messages[index])
    return messages


def call(channel: grpc.Channel, target: Target, messages: Sequence[bytes], deadline_s: float, read_s: float | None) -> Outcome:
    """Send `messages` as one call and wait for its end (`read_s` after the first answer: cancel; None: read all)."""
    started = time.monotonic()
    responses = 0
    try:
        if target.kind == "unary_unary":
            channel.unary_unary(target.method)(messages[0], timeout=deadline_s)
            return Outcome("OK", time.monotonic() - started, 1)
        if target.kind == "unary_stream":
            answers = channel.unary_stream(target.method)(messages[0], timeout=deadline_s)
        else:
            answers = channel.stream_stream(target.method)(iter(messages), timeout=deadline_s)
        first_s = None
        for _ in answers:
            responses += 1
            first_s = first_s or time.monotonic()
            if read_s is not None and time.monotonic() - first_s > read_s:
                answers.cancel()
                break
        return Outcome("OK", time.monotonic() - started, responses)
    except grpc.RpcError as error:
        return Outcome(error.code().name, time.monotonic() - started, responses, error.details() or "")


def judge(target: Target, messages: list[bytes], outcome: Outcome, deadline_s: float) -> Finding | None:
    """The rule an outcome broke, if any."""
    if outcome.code == "DEADLINE_EXCEEDED" or outcome.seconds > deadline_s + LATE_S:
        return Finding("hang", target.name, f"{outcome.code} after {outcome.seconds:.1f} s", messages)
    if outcome.code not in CLEAR_CODES:
        return Finding("unclear", target.name, f"{outcome.code}: {outcome.details[:200]}", messages)
    return None


def health_calls(channels: Mapping[str, grpc.Channel], targets: Sequence[Target]) -> list[Finding]:
    """Each target's first valid call, read in full; a finding for each that does not end OK with an answer."""
    found = []
    for target in targets:
        outcome = call(channels[target.service], target, target.seeds[0], HEALTH_DEADLINE_S, None)
        if outcome.code != "OK" or outcome.responses == 0:
            detail = f"a valid call ended {outcome.code} with {outcome.responses} answers: {outcome.details[:200]}"
            found.append(Finding("unhealthy", target.name, detail, list(target.seeds[0])))
    return found


def run_fuzz(
    channels: Mapping[str, grpc.Channel],
    alive: Callable[[], Mapping[str, bool]],
    *,
    seconds: float,
    seed: int,
    deadline_s: float = DEFAULT_DEADLINE_S,
    health_every: int = 50,
    log: Callable[[str], None] = lambda line: None,
) -> FuzzReport:
    """Fuzz every target for `seconds`; stops early when a process dies."""
    targets = build_targets(channels)
    rng = random.Random(seed)
    mutator = Mutator(rng)
    report = FuzzReport(seed=seed, codes={target.name: Counter() for target in targets})
    weights = [target.weight for target in targets]
    started = time.monotonic()
    since_health = 0
    while time.monotonic() - started < seconds:
        target = rng.choices(targets, weights)[0]
        messages = make_input(target, mutator)
        outcome = call(channels[target.service], target, messages, deadline_s, READ_AFTER_FIRST_S)
        report.inputs[target.name] += 1
        report.codes[target.name][outcome.code] += 1
        finding = judge(target, messages, outcome, deadline_s)
        if finding is not None:
            report.findings.append(finding)
            log(finding.describe())
        dead = [name for name, running in alive().items() if not running]
        if dead:
            report.findings.append(Finding("crash", target.name, f"{', '.join(dead)} stopped running", messages))
            break
        since_health += 1
        if since_health >= health_every:
            since_health = 0
            report.health_checks += len(targets)
            report.findings.extend(health_calls(channels, targets))
    if all(alive().values()):
        report.health_checks += len(targets)
        report.findings.extend(health_calls(channels, targets))
    report.seconds = time.monotonic() - started
    return report


def main(argv: list[str] | None = None) -> int:
    from tests.support.mesh import Mesh  # the mesh only for a run of its own

    parser = argparse.ArgumentParser(description="Fuzz a fresh mesh's servers with mutated raw requests.")
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to send inputs")
    parser.add_argument("--seed", default="random", help="an integer for a run that can be repeated, or random")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the services' logs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    seed = random.SystemRandom().randrange(2**32) if args.seed == "random" else int(args.seed)
    print(f"seed {seed} (repeat with --seed {seed})", flush=True)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tts-fuzz-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    mesh = Mesh(log_dir=log_dir).start()
    try:
        channels = {"gateway": grpc.insecure_channel(mesh.gateway_address)}
        channels.update({name: mesh.worker_channel(name) for name in ("acoustic", "vocoder")})
        report = run_fuzz(
            channels,
            lambda: {name: service.process.poll() is None for name, service in mesh.services.items()},
            seconds=args.seconds,
            seed=seed,
            log=lambda line: print(line, flush=True),
        )
    finally:
        mesh.stop()
    print(report.summary())
    print(f"service logs in {log_dir}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
