"""The gateway's view of its workers: channels, health, load, ejection, retry budget and model versions.

Health comes from one grpc.health.v1 Watch per endpoint (`HealthWatcher`); each attempt is chosen
by `Attempts` (libs.routing.attempts) over a per-kind `HealthTable` and `Picker`, so the local
zone is preferred and failures eject. The acoustic model version (part of every cache key) is read
once per endpoint each time it turns SERVING and kept, so a cache hit needs no acoustic worker.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Final

import grpc
from opentelemetry.trace import TracerProvider
from prometheus_client import CollectorRegistry

from libs.upstream.settings import UpstreamSettings, channel_credentials, channel_options
from libs.routing.attempts import Attempts
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.routing import events
from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, HealthWatcher, Serving, WatchConfig
from libs.routing.picker import Picker, PickerConfig
from libs.routing.retry import RetryBudget, RetryBudgetConfig, RetryConfig, RetryPolicy
from libs.telemetry.tracing import client_interceptors
from libs.upstream.metrics import RoutingMetrics

_log = logging.getLogger(__name__)

KINDS: Final = ("acoustic", "vocoder")
MODEL_INFO_TIMEOUT_S: Final = 2.0
MODEL_INFO_RETRY_S: Final = 1.0
# Watch reconnects back off to at most this, so a restarted worker is routable again within ~2 s
# (the channel's own reconnect backoff is capped likewise in libs.upstream.settings).
WATCH_RECONNECT_MAX_S: Final = 2.0


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
    ) -> None:
        self.settings = settings
        self.tracer_provider = tracer_provider
        """Where retry and resume spans go (None: the process's global tracer provider)."""
        self.local_zone = local_zone
        self.metrics = RoutingMetrics(registry)
        rng = rng or random.Random()
        self.budget = RetryBudget(retry_budget)
        self.metrics.retry_budget_tokens.set_function(self.budget.tokens)
        acoustic, vocoder = settings.acoustic, settings.vocoder
        endpoints = {"acoustic": list(acoustic), "vocoder": list(vocoder)}
        # One set of credentials for every channel: the health Watch, GetModelInfo and the streams all share them.
        credentials = channel_credentials(settings)
        self._channels = {endpoint: self._channel(endpoint, credentials) for endpoint in [*acoustic, *vocoder]}
        self._tables: dict[str, HealthTable] = {}
        self._pickers: dict[str, Picker] = {}
        self._policies: dict[str, RetryPolicy] = {}
        self._watchers: list[HealthWatcher] = []
        for kind in KINDS:
            hook = self.metrics.hook_for(kind, also=self._on_event_of(kind))
            table = HealthTable(endpoints[kind], ejection, on_event=hook)
            self._tables[kind] = table
            self._pickers[kind] = Picker(table, PickerConfig(local_zone=local_zone), rng=rng, on_event=hook)
            self._policies[kind] = RetryPolicy(retry, budget=self.budget, rng=rng, on_event=hook)
            channels = {endpoint: self._channels[endpoint] for endpoint in endpoints[kind]}
            self._watchers.append(HealthWatcher(table, channels, WatchConfig(reconnect_max_s=WATCH_RECONNECT_MAX_S), rng, hook))
        self._model_info: dict[Endpoint, acoustic_pb2.ModelInfo] = {}
        self._info_fresh: set[Endpoint] = set()
        self._last_info: acoustic_pb2.ModelInfo | None = None
        self._info_tasks: dict[Endpoint, asyncio.Task[None]] = {}
        self.changed = asyncio.Event()
        """Set (and cleared) whenever health or a model version changes, for whoever waits on readiness."""

    def _channel(self, endpoint: Endpoint, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
        options, interceptors = channel_options(self.settings), client_interceptors()
        if credentials is None:
            return grpc.aio.insecure_channel(endpoint.address, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(endpoint.address, credentials, options=options, interceptors=interceptors)

    def start(self) -> None:
        """Start watching every endpoint's health (call on the running event loop)."""
        for watcher in self._watchers:
            watcher.start()

    async def close(self) -> None:
        """Stop watching and close every channel."""
        for watcher in self._watchers:
            await watcher.stop()
        for task in self._info_tasks.values():
            task.cancel()
        await asyncio.gather(*self._info_tasks.values(), return_exceptions=True)
        await asyncio.gather(*(channel.close() for channel in self._channels.values()), return_exceptions=True)

    @property
    def ready(self) -> bool:
        """Whether a vocoder and an acoustic worker (with a known model version) can take streams now."""
        vocoders = any(status.available for status in self._tables["vocoder"].statuses())
        acoustics = any(
            status.available and status.endpoint in self._info_fresh for status in self._tables["acoustic"].statuses()
        )
        return vocoders and acoustics

    def table(self, kind: str) -> HealthTable:
        """The health table of `kind` endpoints."""
        return self._tables[kind]

    def attempts(self, kind: str, model_version: str | None = None) -> Attempts:
        """Attempt bookkeeping for one sentence on `kind` workers; acoustic ones must run `model_version`."""

        def eligible(endpoint: Endpoint) -> bool:
            if kind != "acoustic":
                return True
            info = self._model_info.get(endpoint)
            return endpoint in self._info_fresh and info is not None and info.model_version == model_version

        return Attempts(kind, self._tables[kind], self._pickers[kind], self._policies[kind], eligible)

    def acoustic_stub(self, endpoint: Endpoint) -> acoustic_pb2_grpc.AcousticStub:
        """A stub on `endpoint`'s channel."""
        return acoustic_pb2_grpc.AcousticStub(self._channels[endpoint])

    def vocoder_stub(self, endpoint: Endpoint) -> vocoder_pb2_grpc.VocoderStub:
        """A stub on `endpoint`'s channel."""
        return vocoder_pb2_grpc.VocoderStub(self._channels[endpoint])

    def model_info(self) -> acoustic_pb2.ModelInfo | None:
        """The acoustic model new requests are keyed on: that of the routable (local first) acoustic
        workers, else the last one any worker reported; None if no worker has ever answered."""
        routable = [
            status.endpoint
            for status in self._tables["acoustic"].statuses()
            if status.available and status.endpoint in self._info_fresh
        ]
        routable.sort(key=lambda endpoint: endpoint.zone != self.local_zone)
        return self._model_info[routable[0]] if routable else self._last_info

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
                # A worker that comes back may run new weights: its version is read again then.
                self._info_fresh.discard(endpoint)
            elif endpoint not in self._info_fresh and endpoint not in self._info_tasks:
                task = asyncio.get_running_loop().create_task(self._read_model_info(endpoint), name=f"model-info {endpoint}")
                self._info_tasks[endpoint] = task
                task.add_done_callback(lambda _task, endpoint=endpoint: self._info_tasks.pop(endpoint, None))

    async def _read_model_info(self, endpoint: Endpoint) -> None:
        table = self._tables["acoustic"]
        while table.status(endpoint).serving is Serving.SERVING:
            try:
                info = await self.acoustic_stub(endpoint).GetModelInfo(
                    acoustic_pb2.GetModelInfoRequest(), timeout=MODEL_INFO_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                _log.warning("GetModelInfo on %s failed (%s); asking again", endpoint, error.code().name)
                await asyncio.sleep(MODEL_INFO_RETRY_S)
                continue
            self._model_info[endpoint] = info
            self._info_fresh.add(endpoint)
            self._last_info = info
            _log.info("%s serves model %s", endpoint, info.model_version)
            self.changed.set()
            self.changed.clear()
            return
