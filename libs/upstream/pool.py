"""The gateway's view of its workers: channels, health, load, ejection, retry budget and model versions.

Every configured `ZONE=NAME:PORT` stands for all the pods behind NAME (libs.routing.discovery:
DNS re-resolution, or Kubernetes EndpointSlices). The pool keeps one channel and one health Watch
per pod, adds a pod as soon as discovery lists it, and drains one that goes away: no new streams,
its own finish, then its channel closes. Health comes from one grpc.health.v1 Watch per endpoint (`HealthWatcher`); each attempt is chosen
by `Attempts` (libs.routing.attempts) over a per-kind `HealthTable` and `Picker`, so the local
zone is preferred and failures eject. The acoustic model version (part of every cache key) is read
once per endpoint and voice each time the endpoint turns SERVING and kept, so a cache hit needs no
acoustic worker.

Workers may serve several voices and hold some of them in memory (libs.serving.voice_shelf); their
loads say which. A stream goes to a worker that holds its voice, or, where none does, to one that
can load it; the first stream of a voice nobody holds asks one worker to load it (GetModelInfo).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import load_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.routing import events
from libs.routing.attempts import Attempts
from libs.routing.discovery import DiscoverySource, DnsDiscovery, Publish, Resolver, Snapshot, is_ip_literal, system_resolver
from libs.routing.endpoints import Endpoint
from libs.routing.health import EndpointStatus, HealthConfig, HealthTable, Serving
from libs.routing.picker import Picker, PickerConfig
from libs.routing.retry import RetryBudget, RetryBudgetConfig, RetryConfig, RetryPolicy
from libs.routing.watcher import HealthWatcher, WatchConfig
from libs.telemetry.tracing import client_interceptors
from libs.upstream.loads import LOAD_TIMEOUT_S, KnownLoad, LoadWatcher, summed_capacity
from libs.upstream.metrics import RoutingMetrics
from libs.upstream.playback import PieceGaps, StartGaps, StartSlots
from libs.upstream.settings import UpstreamSettings, channel_credentials, channel_options
from libs.voice.tiers import QUALITY
from libs.wire.headers import GATEWAY_METADATA_KEY, SPEAKER_METADATA_KEY, TIER_METADATA_KEY, VOICE_METADATA_KEY

_log = logging.getLogger(__name__)

KINDS: Final = ("acoustic", "vocoder")
MODEL_INFO_TIMEOUT_S: Final = 2.0
"""Longest a GetModelInfo call may take; an acoustic endpoint takes streams only once its model is known."""
VOICE_LOAD_TIMEOUT_S: Final = 120.0
"""Longest a GetModelInfo may take that makes a worker load a voice it does not hold."""
MODEL_INFO_RETRY_S: Final = 1.0
"""Pause before a SERVING endpoint whose GetModelInfo failed is asked again (one call in flight per endpoint)."""
# Watch reconnects back off to at most this, so a restarted worker is routable again within ~2 s
# (the channel's own reconnect backoff is capped likewise in libs.upstream.settings).
WATCH_RECONNECT_MAX_S: Final = 2.0
DRAIN_CHECK_S: Final = 1.0
"""How often drained endpoints (no stream left) are looked for, to close their channels."""


@dataclass(frozen=True)
class UnroutableTarget:
    """A configured `ZONE=NAME:PORT` as an endpoint status that is never available."""

    endpoint: Endpoint
    available: bool = False


class WorkerPool:
    """Channels, health and routing state of every acoustic and vocoder endpoint of one gateway."""

    def __init__(
        self,
        settings: UpstreamSettings,
        local_zone: str,
        *,
        retry: RetryConfig = RetryConfig(),
        retry_budget: RetryBudgetConfig = RetryBudgetConfig(),
        ejection: HealthConfig = HealthConfig(),
        registry: CollectorRegistry | None = None,
        rng: random.Random | None = None,
        tracer_provider: TracerProvider | None = None,
        resolver: Resolver = system_resolver,
        discovery: Callable[[tuple[Endpoint, ...], Publish], DiscoverySource] | None = None,
    ) -> None:
        """`resolver` answers DNS discovery; `discovery(targets, publish)` builds another source (tests)."""
        self.settings = settings
        self.tracer_provider = tracer_provider
        """Where retry and resume spans go (None: the process's global tracer provider)."""
        self.local_zone = local_zone
        self.metrics = RoutingMetrics(registry)
        rng = rng or random.Random()
        self.budget = RetryBudget(retry_budget)
        self.start_gaps = StartGaps()
        """How long listeners' second pieces have come after their first, lately (what a first piece is held to outlast)."""
        self.piece_gaps = PieceGaps()
        """How long playing listeners have waited for their next piece of a sentence, lately."""
        self.starts = StartSlots(self.realtime_capacity)
        """Turns of streams starting on the workers (a share of the listeners they keep playing)."""
        self.metrics.retry_budget_tokens.set_function(self.budget.tokens)
        self.metrics.streams_starting.set_function(lambda: self.starts.starting)
        self.metrics.streams_waiting_to_start.set_function(lambda: self.starts.waiting)
        # One set of credentials for every channel: the health Watch, GetModelInfo and the streams all share them.
        self._credentials = channel_credentials(settings)
        self._channels: dict[Endpoint, grpc.aio.Channel] = {}
        self._tables: dict[str, HealthTable] = {}
        self._pickers: dict[str, Picker] = {}
        self._policies: dict[str, RetryPolicy] = {}
        self._watchers: dict[str, HealthWatcher] = {}
        picker_config = PickerConfig(local_zone=local_zone, strategy=settings.pick_strategy)  # type: ignore[arg-type]
        for kind in KINDS:
            hook = self.metrics.hook_for(kind, also=self._on_event_of(kind))
            table = HealthTable((), ejection, on_event=hook)
            self._tables[kind] = table
            self._pickers[kind] = Picker(table, picker_config, rng=rng, on_event=hook)
            self._policies[kind] = RetryPolicy(retry, budget=self.budget, rng=rng, on_event=hook)
            self._watchers[kind] = HealthWatcher(table, {}, WatchConfig(reconnect_max_s=WATCH_RECONNECT_MAX_S), rng, hook)
        self._default_info: dict[Endpoint, acoustic_pb2.ModelInfo] = {}
        """Each acoustic endpoint's default voice, read when it turns SERVING."""
        self._voice_info: dict[tuple[Endpoint, str], acoustic_pb2.ModelInfo] = {}
        """What each endpoint said of each voice it was asked about (it holds those, or did)."""
        self._info_fresh: set[Endpoint] = set()
        self._last_info: acoustic_pb2.ModelInfo | None = None
        self._last_voice_info: dict[str, acoustic_pb2.ModelInfo] = {}
        self._info_tasks: dict[Endpoint, asyncio.Task[None]] = {}
        self._voice_flights: dict[str, asyncio.Future[acoustic_pb2.ModelInfo]] = {}
        self._voice_answered_s: dict[tuple[Endpoint, str], float] = {}
        """When each endpoint answered a GetModelInfo for a voice (monotonic seconds)."""
        self.changed = asyncio.Event()
        """Set (and cleared) whenever health or a model version changes, for whoever waits on readiness."""
        self.targets: tuple[Endpoint, ...] = (*settings.acoustic, *settings.vocoder)
        """The configured `ZONE=NAME:PORT` entries, each standing for every pod behind NAME."""
        self._snapshots: dict[Endpoint, Snapshot] = {}
        for target in self.targets:
            if is_ip_literal(target.host):  # nothing to resolve: routable as soon as its Watch answers
                self._snapshots[target] = Snapshot(live=frozenset({target}))
        self._apply()
        source: DiscoverySource
        if discovery is not None:
            source = discovery(self.targets, self._on_snapshot)
        elif settings.discovery == "kubernetes":
            from libs.routing.kubernetes import EndpointSliceDiscovery  # lightkube is imported only where it is used

            source = EndpointSliceDiscovery(self.targets, self._on_snapshot, settings.discovery_namespace)
        else:
            source = DnsDiscovery(self.targets, self._on_snapshot, settings.discovery_interval_s, resolver)
        self._discovery: DiscoverySource = source
        self._tasks: list[asyncio.Task[None]] = []
        self.gateway_id = uuid.uuid4().hex[:16]
        """This gateway's id on the workers (`GATEWAY_METADATA_KEY`), so each can say whose streams it holds."""
        self.call_metadata: tuple[tuple[str, str], ...] = ((GATEWAY_METADATA_KEY, self.gateway_id),)
        """Metadata every worker stream of this gateway opens with."""
        self.loads = LoadWatcher(self._serving_endpoints, self._ask_load)
        """What each serving worker last said it can take on (libs.upstream.loads)."""

    def _channel(self, endpoint: Endpoint, server_name: str) -> grpc.aio.Channel:
        options, interceptors = channel_options(self.settings), client_interceptors()
        if self._credentials is None:
            return grpc.aio.insecure_channel(endpoint.address, options=options, interceptors=interceptors)
        if not self.settings.tls_server_name and server_name != endpoint.host:
            # A pod is dialled by its address; its certificate names the Service it was found behind.
            options = [*options, ("grpc.ssl_target_name_override", server_name)]
        return grpc.aio.secure_channel(endpoint.address, self._credentials, options=options, interceptors=interceptors)

    def start(self) -> None:
        """Start discovery and every endpoint's health Watch (call on the running event loop)."""
        for watcher in self._watchers.values():
            watcher.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._discovery.run(), name="worker-discovery"),
            loop.create_task(self._reap_forever(), name="worker-drain"),
        ]
        self.loads.start()
        for task in self._tasks:
            task.add_done_callback(_log_if_failed)

    async def close(self) -> None:
        """Stop discovery and watching, and close every channel."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.loads.stop()
        for watcher in self._watchers.values():
            await watcher.stop()
        for task in self._info_tasks.values():
            task.cancel()
        await asyncio.gather(*self._info_tasks.values(), return_exceptions=True)
        await asyncio.gather(*(channel.close() for channel in self._channels.values()), return_exceptions=True)

    def _on_snapshot(self, target: Endpoint, snapshot: Snapshot) -> None:
        """Discovery's `publish`: remember `target`'s pods and bring the tables in line."""
        self._snapshots[target] = snapshot
        self._apply()

    def _apply(self) -> None:
        """Add every live pod not tracked yet (channel and Watch), drain every pod no target lists live."""
        live: dict[Endpoint, str] = {}
        for target, snapshot in self._snapshots.items():
            for endpoint in snapshot.live:
                live.setdefault(endpoint, target.host)
        for endpoint, server_name in live.items():
            table = self._tables[endpoint.kind]
            if table.add(endpoint):
                channel = self._channel(endpoint, server_name)
                self._channels[endpoint] = channel
                self._watchers[endpoint.kind].watch(endpoint, channel)
                _log.info("worker %s added", endpoint)
        for kind in KINDS:
            for status in self._tables[kind].statuses():
                if status.endpoint not in live and not status.draining:
                    self._tables[kind].drain(status.endpoint)
                    _log.info("worker %s draining (%d streams left)", status.endpoint, status.outstanding_streams)
        self.changed.set()
        self.changed.clear()

    async def reap(self) -> list[Endpoint]:
        """Forget drained endpoints (no stream left): stop their Watch and close their channel."""
        gone: list[Endpoint] = []
        closing: list[tuple[asyncio.Task[None] | None, grpc.aio.Channel | None]] = []
        for kind in KINDS:
            for endpoint in self._tables[kind].remove_drained():
                # Everything about the endpoint goes before the first await, so a pod that discovery
                # lists again meanwhile starts afresh instead of losing its new channel here.
                info_task = self._info_tasks.pop(endpoint, None)
                if info_task is not None:
                    info_task.cancel()
                self._forget_infos(endpoint)
                self.loads.forget(endpoint)
                closing.append((self._watchers[kind].forget(endpoint), self._channels.pop(endpoint, None)))
                _log.info("worker %s drained and forgotten", endpoint)
                gone.append(endpoint)
        for watch_task, channel in closing:
            if watch_task is not None:
                await asyncio.gather(watch_task, return_exceptions=True)
            if channel is not None:
                await channel.close()
        return gone

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(DRAIN_CHECK_S)
            try:
                await self.reap()
            except Exception:  # never let a close error stop draining
                _log.exception("closing drained worker channels failed")

    def routable(self, endpoint: Endpoint) -> bool:
        """Whether a stream may be routed to acoustic `endpoint` now: available, its model known."""
        return endpoint in self._info_fresh and self._tables["acoustic"].is_available(endpoint)

    @property
    def ready(self) -> bool:
        """Whether a vocoder and an acoustic worker (with a known model version) can take streams now."""
        vocoders = any(status.available for status in self._tables["vocoder"].statuses())
        acoustics = any(
            status.available and status.endpoint in self._info_fresh for status in self._tables["acoustic"].statuses()
        )
        return vocoders and acoustics

    def _serving_endpoints(self) -> list[Endpoint]:
        return [
            status.endpoint
            for kind in KINDS
            for status in self._tables[kind].statuses()
            if status.serving is Serving.SERVING and status.endpoint in self._channels
        ]

    def _ask_load(self, endpoint: Endpoint) -> Any:
        stub = self.acoustic_stub(endpoint) if endpoint.kind == "acoustic" else self.vocoder_stub(endpoint)
        return stub.GetLoad(load_pb2.GetLoadRequest(), timeout=LOAD_TIMEOUT_S)

    def available_loads(self, kind: str) -> list[KnownLoad]:
        """The last loads of the `kind` workers new streams may go to now."""
        return self.loads.loads(status.endpoint for status in self._tables[kind].statuses() if status.available)

    def realtime_capacity(self) -> float:
        """Streams the mesh keeps playing in real time, as its workers say (0: not known): the smaller
        of the acoustic and the vocoder sums (each worker's own figure already counts the processes it
        shares its CPU with)."""
        sums = [summed_capacity(self.available_loads(kind)) for kind in KINDS]
        return min(sums) if all(total > 0 for total in sums) else 0.0

    def fast_tier_cost(self) -> float:
        """What an audio second of a voice's fast tier costs the mesh against one of its quality tier, as
        the workers measured them: the acoustic side's CPU is the same in both, the vocoder's steps cost
        what the vocoders measured (1 while not known: a fast listener then counts as a quality one)."""
        acoustic = [known.load.cpu_s_per_audio_s for known in self.available_loads("acoustic") if known.load.cpu_s_per_audio_s > 0]
        vocoders = [known.load for known in self.available_loads("vocoder") if known.load.cpu_s_per_audio_s > 0]
        shares = [load.fast_tier_cost for load in vocoders if load.fast_tier_cost > 0]
        if not acoustic or not vocoders or not shares:
            return 1.0
        acoustic_s = sum(acoustic) / len(acoustic)
        vocoder_s = sum(load.cpu_s_per_audio_s for load in vocoders) / len(vocoders)
        return min(1.0, (acoustic_s + vocoder_s * max(shares)) / (acoustic_s + vocoder_s))

    def stream_slots(self) -> int | None:
        """Streams the available workers take at once, as they said when they admitted a stream or in
        their load (the smaller of the acoustic and the vocoder sums); None while a kind's workers set
        no limit or have not said theirs."""
        sums = []
        for kind in KINDS:
            limits = [self._stream_limit(status) for status in self._tables[kind].statuses() if status.available]
            if limits and all(limit for limit in limits):
                sums.append(sum(limit for limit in limits if limit))
        return min(sums) if sums else None

    def _stream_limit(self, status: EndpointStatus) -> int | None:
        if status.stream_limit is not None:
            return status.stream_limit
        known = self.loads.load(status.endpoint)
        return known.load.stream_limit if known is not None and known.load.stream_limit else None

    def other_gateways_streams(self) -> int:
        """Streams other gateways hold on the available workers, as the workers last said (of whichever
        kind counts more)."""
        return max(
            sum(count for known in self.available_loads(kind) for gateway, count in known.load.open_streams_by_gateway.items() if gateway != self.gateway_id)
            for kind in KINDS
        )

    def step_lead_s(self, endpoint: Endpoint | None, kind: str) -> float:
        """How long a step of `endpoint` (None: the slowest available `kind` worker) takes now, nearly
        always, with a round trip to it on top (0: not known)."""
        loads = [known] if endpoint is not None and (known := self.loads.load(endpoint)) else self.available_loads(kind)
        return max((known.load.step_lead_ms / 1000.0 + known.rtt_s for known in loads), default=0.0)

    def piece_lead_s(self) -> float:
        """How long a listener alone that holds only its first piece may wait for more from the vocoder
        now, nearly always, with a round trip on top: its `piece_lead_ms` (its next steps against the
        audio of those between), or its longest step's lead where it does not say (0: not known)."""
        loads = self.available_loads("vocoder")
        return max(
            (((known.load.piece_lead_ms or known.load.step_lead_ms) / 1000.0 + known.rtt_s) for known in loads), default=0.0
        )

    def piece_wait_s(self, alone: bool = False) -> float:
        """How long a listener may wait for its next piece on this mesh now: the vocoder's step lead
        (hops included), or how long next pieces have come after first ones lately (`StartGaps`:
        queueing behind other streams' steps included), whichever is longer. Audio a listener holds
        below this is no cushion: it may run out before the next piece comes. A listener `alone` on
        the workers waits on no other stream's step, only on its own next steps (`piece_lead_s`), and
        its history is that of starts that began alone; with others a part may queue behind another stream's
        whole step."""
        return max(self.piece_lead_s() if alone else self.step_lead_s(None, "vocoder"), self.start_gaps.high_s(alone))

    def playing_wait_s(self) -> float:
        """How long a playing listener may wait for its next piece now: the longer of a first piece's
        wait (`piece_wait_s`) and how long playing listeners have waited lately (`PieceGaps`)."""
        return max(self.piece_wait_s(), self.piece_gaps.high_s())

    def round_trip_s(self, endpoint: Endpoint | None) -> float:
        """A round trip to `endpoint`, as its load asks measure it (0: not known)."""
        known = self.loads.load(endpoint) if endpoint is not None else None
        return known.rtt_s if known is not None else 0.0

    def vocoder_pacing(self, endpoint: Endpoint | None) -> load_pb2.VocoderPacing | None:
        """How the vocoder at `endpoint` (None: any available one) steps through mel, if it said."""
        loads = [known] if endpoint is not None and (known := self.loads.load(endpoint)) else self.available_loads("vocoder")
        for known in loads:
            if known.load.HasField("pacing") and known.load.pacing.lag_frames > 0:
                return known.load.pacing
        return None

    def first_audio_s(self, phoneme_ids: int) -> float:
        """How long a sentence of `phoneme_ids` takes to its first audio on an idle mesh, nearly always:
        its plan and first chunk on the slowest available acoustic worker, then the vocoder's step
        (0: not known)."""
        acoustic, vocoder = self.available_loads("acoustic"), self.available_loads("vocoder")
        if not acoustic or not vocoder:
            return 0.0
        plan_ms = max(known.load.plan_fixed_ms + known.load.plan_per_id_ms * phoneme_ids + known.load.first_step_ms for known in acoustic)
        step_ms = max(known.load.first_step_ms for known in vocoder)
        hops_s = max(known.rtt_s for known in acoustic) + max(known.rtt_s for known in vocoder)
        return (plan_ms + step_ms) / 1000.0 + hops_s

    def endpoint_statuses(self) -> list[EndpointStatus | UnroutableTarget]:
        """Every pod's status, and an unroutable stand-in for each configured target, so a zone whose
        pods are all gone still counts 0 routable workers (`tts_gateway_healthy_endpoints`) instead of
        vanishing from the metric."""
        targets = [UnroutableTarget(target) for target in self.targets]
        return [*targets, *(status for kind in KINDS for status in self._tables[kind].statuses())]

    def table(self, kind: str) -> HealthTable:
        """The health table of `kind` endpoints."""
        return self._tables[kind]

    def attempts(self, kind: str, model_version: str | None = None, voice: str = "") -> Attempts:
        """Attempt bookkeeping for one sentence on `kind` workers that serve `voice` ("": the default
        voice), those holding it first; acoustic ones must run `model_version`."""

        def eligible(endpoint: Endpoint) -> bool:
            if not self._serves(endpoint, voice):
                return False
            if kind == "acoustic":
                info = self._info_of(endpoint, voice)
                if info is not None and info.model_version != model_version:
                    return False
                if info is None and not voice:
                    return False  # the default voice's version is read when the endpoint turns SERVING
            return True

        return Attempts(
            kind, self._tables[kind], self._pickers[kind], self._policies[kind], eligible, lambda endpoint: self._holds(endpoint, voice)
        )

    def stream_metadata(self, voice: str, speaker_id: int = 0, tier: str = "") -> tuple[tuple[str, str], ...]:
        """Metadata a worker stream of `voice` ("": the worker's default voice), `speaker_id` and
        `tier` ("": quality) opens with (the vocoder needs the speaker and the tier: the mel says neither)."""
        metadata = (*self.call_metadata, (VOICE_METADATA_KEY, voice)) if voice else self.call_metadata
        metadata = (*metadata, (SPEAKER_METADATA_KEY, str(speaker_id))) if speaker_id else metadata
        return (*metadata, (TIER_METADATA_KEY, tier)) if tier and tier != QUALITY else metadata

    def _info_of(self, endpoint: Endpoint, voice: str) -> acoustic_pb2.ModelInfo | None:
        if endpoint not in self._info_fresh:
            return None
        default = self._default_info.get(endpoint)
        if not voice or (default is not None and default.voice == voice):
            return default
        return self._voice_info.get((endpoint, voice))

    def _serves(self, endpoint: Endpoint, voice: str) -> bool:
        """Whether `endpoint` serves `voice`, as far as is known: its load lists the voices it serves;
        an acoustic worker that lists none serves only its default voice; a vocoder that has not said
        may."""
        if not voice or (endpoint.kind == "acoustic" and self._info_of(endpoint, voice) is not None):
            return True
        known = self.loads.load(endpoint)
        if known is not None and known.load.voices:
            return voice in known.load.voices
        if endpoint.kind == "acoustic":
            default = self._default_info.get(endpoint)
            return default is not None and default.voice == voice
        return True

    def _holds(self, endpoint: Endpoint, voice: str) -> bool:
        """Whether `endpoint` has `voice` in memory now, as the later of its last load and its answer
        to a GetModelInfo for the voice (which loaded it) said."""
        if not voice:
            return True
        known = self.loads.load(endpoint)
        answered_s = self._voice_answered_s.get((endpoint, voice))
        if known is not None and known.load.voices and (answered_s is None or known.at_s > answered_s):
            return voice in known.load.loaded_voices
        return answered_s is not None or self._serves(endpoint, voice)

    def acoustic_stub(self, endpoint: Endpoint) -> acoustic_pb2_grpc.AcousticStub:
        """A stub on `endpoint`'s channel."""
        return acoustic_pb2_grpc.AcousticStub(self._channels[endpoint])

    def vocoder_stub(self, endpoint: Endpoint) -> vocoder_pb2_grpc.VocoderStub:
        """A stub on `endpoint`'s channel."""
        return vocoder_pb2_grpc.VocoderStub(self._channels[endpoint])

    def model_info(self, voice: str = "") -> acoustic_pb2.ModelInfo | None:
        """The acoustic model new requests of `voice` ("": the workers' default voice) are keyed on:
        that of the routable (local first) acoustic workers, else the last one any worker reported;
        None if no worker has answered for it."""
        routable = [
            info
            for status in sorted(self._tables["acoustic"].statuses(), key=lambda status: status.endpoint.zone != self.local_zone)
            if status.available and (info := self._info_of(status.endpoint, voice)) is not None
        ]
        if routable:
            return routable[0]
        return self._last_voice_info.get(voice) if voice else self._last_info

    async def voice_model_info(self, voice: str) -> acoustic_pb2.ModelInfo | None:
        """`model_info(voice)`, asking a worker that serves `voice` to load it when no routable one
        has answered for it yet (one ask per voice however many streams wait); None when no available
        worker serves it."""
        info = self.model_info(voice)
        if info is not None or not voice:
            return info
        flight = self._voice_flights.get(voice)
        if flight is None:
            flight = asyncio.ensure_future(self._ask_voice(voice))
            self._voice_flights[voice] = flight
            flight.add_done_callback(lambda _done: self._voice_flights.pop(voice, None))
        return await asyncio.shield(flight)

    async def _ask_voice(self, voice: str) -> acoustic_pb2.ModelInfo | None:
        candidates = [
            status.endpoint
            for status in self._tables["acoustic"].statuses()
            if status.available and status.endpoint in self._info_fresh and self._serves(status.endpoint, voice)
        ]
        # Those holding it already (a load takes seconds), then the local zone, then the least busy;
        # what each holds is asked first where it is not known yet (just after a start), or the
        # local zone would load a voice that another zone already holds.
        vocoders = [status.endpoint for status in self._tables["vocoder"].statuses() if status.available]
        await self.loads.ensure([*candidates, *vocoders])  # the vocoders' too: the stream picks one next
        holds = {endpoint: self._holds(endpoint, voice) for endpoint in candidates}
        candidates.sort(key=lambda endpoint: (not holds[endpoint], endpoint.zone != self.local_zone, self._open_streams(endpoint)))
        _log.info(
            "voice %s: asking %s (holding it: %s; load not known: %s)", voice, [str(endpoint) for endpoint in candidates],
            [str(endpoint) for endpoint in candidates if holds[endpoint]] or "none",
            [str(endpoint) for endpoint in candidates if self.loads.load(endpoint) is None] or "none",
        )  # fmt: skip
        for endpoint in candidates:
            try:
                info = await self.acoustic_stub(endpoint).GetModelInfo(
                    acoustic_pb2.GetModelInfoRequest(voice=voice), timeout=VOICE_LOAD_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                _log.warning("voice %s on %s: %s (%s)", voice, endpoint, error.code().name, error.details())
                continue
            if endpoint not in self._info_fresh:
                continue
            self._voice_info[(endpoint, voice)] = info
            self._voice_answered_s[(endpoint, voice)] = time.monotonic()
            self._last_voice_info[voice] = info
            _log.info("%s serves voice %s as model %s", endpoint, voice, info.model_version)
            return info
        return None

    def _open_streams(self, endpoint: Endpoint) -> int:
        known = self.loads.load(endpoint)
        return known.load.open_streams if known is not None else 0

    def _forget_infos(self, endpoint: Endpoint) -> None:
        self._default_info.pop(endpoint, None)
        self._info_fresh.discard(endpoint)
        for key in [key for key in self._voice_info if key[0] == endpoint]:
            del self._voice_info[key]
            self._voice_answered_s.pop(key, None)

    def _on_event_of(self, kind: str):  # type: ignore[no-untyped-def]
        def on_event(event: str, zone: str, reason: str) -> None:
            if event != events.HEALTH_CHANGED:
                return
            if kind == "acoustic":
                self._refresh_model_infos()
            self.changed.set()
            self.changed.clear()

        return on_event

    def _refresh_model_infos(self) -> None:
        """Read the model of every acoustic endpoint that turned SERVING; forget freshness of the others."""
        for status in self._tables["acoustic"].statuses():
            endpoint = status.endpoint
            if status.serving is not Serving.SERVING:
                # A worker that comes back may run new weights: its versions are read again then.
                self._forget_infos(endpoint)
            elif endpoint not in self._info_fresh and endpoint not in self._info_tasks:
                task = asyncio.get_running_loop().create_task(self._read_model_info(endpoint), name=f"model-info {endpoint}")
                self._info_tasks[endpoint] = task
                task.add_done_callback(lambda _task, endpoint=endpoint: self._info_tasks.pop(endpoint, None))

    async def _read_model_info(self, endpoint: Endpoint) -> None:
        table = self._tables["acoustic"]
        while table.tracks(endpoint) and table.status(endpoint).serving is Serving.SERVING:
            try:
                info = await self.acoustic_stub(endpoint).GetModelInfo(
                    acoustic_pb2.GetModelInfoRequest(), timeout=MODEL_INFO_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                _log.warning("GetModelInfo on %s failed (%s); asking again", endpoint, error.code().name)
                await asyncio.sleep(MODEL_INFO_RETRY_S)
                continue
            if not table.tracks(endpoint):  # drained and forgotten while it answered
                return
            self._default_info[endpoint] = info
            self._info_fresh.add(endpoint)
            self._last_info = self._last_voice_info[info.voice] = info
            _log.info("%s serves model %s", endpoint, info.model_version)
            self.changed.set()
            self.changed.clear()
            return


def _log_if_failed(task: asyncio.Task[None]) -> None:
    """A discovery or drain task must run as long as the pool: say loudly if one died."""
    if not task.cancelled() and task.exception() is not None:
        _log.error("%s stopped: %r; the worker list is no longer kept fresh", task.get_name(), task.exception())
