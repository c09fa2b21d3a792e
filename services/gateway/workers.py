"""The gateway's view of its workers: one channel each, their health, and the acoustic model version.

Health is polled with grpc.health.v1 Check. The choice of worker sits behind `WorkerPool.choose`
(first healthy, local zone first) so zone-aware routing can replace it without touching the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.mesh.errors import NoWorkerError
from libs.mesh.server import CHANNEL_OPTIONS
from libs.mesh.worker_choice import first_healthy
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.routing.endpoints import Endpoint

_log = logging.getLogger(__name__)

HEALTH_POLL_S: Final = 1.0
HEALTH_TIMEOUT_S: Final = 1.0


class WorkerPool:
    """Channels and health of every acoustic and vocoder endpoint."""

    def __init__(self, acoustic: Sequence[Endpoint], vocoder: Sequence[Endpoint], local_zone: str) -> None:
        self._endpoints = {"acoustic": list(acoustic), "vocoder": list(vocoder)}
        self._local_zone = local_zone
        self._channels = {
            endpoint: grpc.aio.insecure_channel(endpoint.address, options=list(CHANNEL_OPTIONS))
            for endpoint in [*acoustic, *vocoder]
        }
        self._serving: dict[Endpoint, bool] = {endpoint: False for endpoint in self._channels}
        self._model_info: dict[Endpoint, acoustic_pb2.ModelInfo] = {}
        self._poller: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()
        """Set after every poll round, for whoever waits on readiness."""

    def start(self) -> None:
        """Begin polling health in the background."""
        self._poller = asyncio.create_task(self._poll_forever(), name="worker-health")

    async def close(self) -> None:
        """Stop polling and close every channel."""
        if self._poller:
            self._poller.cancel()
        await asyncio.gather(*(channel.close() for channel in self._channels.values()), return_exceptions=True)

    @property
    def ready(self) -> bool:
        """Whether at least one acoustic (with a known model) and one vocoder worker serve."""
        return self._pick("acoustic") is not None and self._pick("vocoder") is not None

    def choose(self, kind: str) -> Endpoint:
        """The endpoint the next `kind` stream goes to; NoWorkerError when none serves."""
        endpoint = self._pick(kind)
        if endpoint is None:
            raise NoWorkerError(f"no {kind} worker is serving right now; retry shortly")
        return endpoint

    def acoustic_stub(self, endpoint: Endpoint) -> acoustic_pb2_grpc.AcousticStub:
        """A stub on `endpoint`'s channel."""
        return acoustic_pb2_grpc.AcousticStub(self._channels[endpoint])

    def vocoder_stub(self, endpoint: Endpoint) -> vocoder_pb2_grpc.VocoderStub:
        """A stub on `endpoint`'s channel."""
        return vocoder_pb2_grpc.VocoderStub(self._channels[endpoint])

    def model_info(self, endpoint: Endpoint) -> acoustic_pb2.ModelInfo:
        """What the acoustic worker at `endpoint` reported about its model."""
        return self._model_info[endpoint]

    def _pick(self, kind: str) -> Endpoint | None:
        def usable(endpoint: Endpoint) -> bool:
            # An acoustic worker is only usable once its model version is known: cache keys need it.
            return self._serving[endpoint] and (kind != "acoustic" or endpoint in self._model_info)

        return first_healthy(self._endpoints[kind], self._local_zone, usable)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.gather(*(self._poll(endpoint) for endpoint in self._channels))
            self.changed.set()
            self.changed.clear()
            await asyncio.sleep(HEALTH_POLL_S)

    async def _poll(self, endpoint: Endpoint) -> None:
        channel = self._channels[endpoint]
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=HEALTH_TIMEOUT_S
            )
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
            if endpoint.kind == "acoustic" and serving and (not self._serving[endpoint] or endpoint not in self._model_info):
                # (Re)read the model on every transition to SERVING: a restarted worker may run new weights.
                self._model_info[endpoint] = await self.acoustic_stub(endpoint).GetModelInfo(
                    acoustic_pb2.GetModelInfoRequest(), timeout=HEALTH_TIMEOUT_S
                )
        except grpc.aio.AioRpcError:
            serving = False
        if serving != self._serving[endpoint]:
            _log.info("%s is %s", endpoint, "SERVING" if serving else "not serving")
        self._serving[endpoint] = serving
