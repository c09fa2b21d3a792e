"""Worker pods from Kubernetes EndpointSlices: every pod of a Service, with its zone and conditions.

For each target `ZONE=NAME:PORT`, the slices labelled `kubernetes.io/service-name=NAME` in the
gateway's namespace are listed and then watched (lightkube's async client; the gateway's
ServiceAccount needs `list` and `watch` on `endpointslices`, k8s/base/gateway-discovery.yaml).
A pod is `live` while its endpoint is ready; it drains (no new streams, its own streams finish)
while it is terminating or not ready, and when it leaves every slice. A slice's endpoint names its
zone (from the node's topology label), which wins over the target's zone, so one Service spanning
zones still routes by zone.

Each watch starts at the resource version of the listing before it, and a broken one is retried with
backoff after listing the slices again, so what changed while it was down is seen; the last state is
kept meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from libs.routing.discovery import Publish, Snapshot, pod_endpoint
from libs.routing.endpoints import Endpoint

_log = logging.getLogger(__name__)

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
WATCH_RETRY_BASE_S: Final = 0.5
WATCH_RETRY_MAX_S: Final = 10.0
"""Cap on the jittered backoff (from WATCH_RETRY_BASE_S, doubling) before a failed EndpointSlice list or watch is tried again; the last answer stays in use meanwhile."""
WATCH_SERVER_TIMEOUT_S: Final = 300
"""The API server ends each watch after this; it is reopened from the last resource version."""
WATCH_DEADLINE_S: Final = WATCH_SERVER_TIMEOUT_S + 30
"""A watch still open this long is given up and the slices listed again: an API server (or a path to
it) that stops answering without closing the connection would otherwise hold a stale view for ever,
since a watch with nothing to report sends nothing."""


def _get(obj: Any, key: str) -> Any:
    """A field of a lightkube model or of the same object as a plain dict (camelCase keys)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _slice_port(target: Endpoint, ports: Iterable[Any] | None) -> int | None:
    """The slice's port for `target`: the one numbered as the target, else the only one (None: no match)."""
    numbers = [_get(port, "port") for port in ports or () if _get(port, "protocol") in (None, "TCP")]
    numbers = [number for number in numbers if number is not None]
    if target.port in numbers:
        return target.port
    return numbers[0] if len(numbers) == 1 else None


def snapshot_of_slices(target: Endpoint, slices: Iterable[Any]) -> Snapshot:
    """The pods of `target`'s Service from its EndpointSlices (lightkube models or dicts).

    `ready` unset counts as ready (the API's rule); terminating or not ready drains. An address
    listed live in one slice and draining in another (a pod moving between slices) is live.
    """
    live: set[Endpoint] = set()
    draining: set[Endpoint] = set()
    for endpoint_slice in slices:
        if _get(endpoint_slice, "addressType") not in (None, "IPv4", "IPv6"):
            continue
        port = _slice_port(target, _get(endpoint_slice, "ports"))
        if port is None:
            continue
        for pod in _get(endpoint_slice, "endpoints") or ():
            conditions = _get(pod, "conditions")
            ready = _get(conditions, "ready")
            terminating = bool(_get(conditions, "terminating"))
            routable = (ready is None or ready) and not terminating
            for ip in _get(pod, "addresses") or ():
                endpoint = pod_endpoint(target, ip, port, _get(pod, "zone"))
                (live if routable else draining).add(endpoint)
    return Snapshot(live=frozenset(live), draining=frozenset(draining - live))


class EndpointSliceDiscovery:
    """Lists and watches the EndpointSlices of every target's Service and publishes its pods."""

    def __init__(
        self,
        targets: Iterable[Endpoint],
        publish: Publish,
        namespace: str = "",
        client_factory: Callable[[], Any] | None = None,
        rng: random.Random | None = None,
        watch_deadline_s: float = WATCH_DEADLINE_S,
    ) -> None:
        self._targets = tuple(targets)
        self._publish = publish
        self._namespace = namespace or None
        self._client_factory = client_factory or _in_cluster_client
        self._rng = rng or random.Random()
        self._watch_deadline_s = watch_deadline_s

    async def run(self) -> None:
        """Watch every target's slices until cancelled."""
        failures = 0
        while True:
            try:
                client = self._client_factory()
                break
            except Exception:  # no ServiceAccount token yet, or a bad KUBECONFIG: say so, and try again
                failures += 1
                _log.exception("cannot build the Kubernetes client for EndpointSlice discovery; trying again")
                await asyncio.sleep(min(WATCH_RETRY_MAX_S, WATCH_RETRY_BASE_S * 2.0 ** min(failures, 16)))
        try:
            await asyncio.gather(*(self._follow(client, target) for target in self._targets))
        finally:
            close = getattr(client, "close", None)
            if close is not None:
                await close()

    async def _follow(self, client: Any, target: Endpoint) -> None:
        from lightkube.resources.discovery_v1 import EndpointSlice

        labels = {SERVICE_NAME_LABEL: target.host}
        failures = 0
        while True:
            slices: dict[str, Any] = {}
            try:
                listing = client.list(EndpointSlice, namespace=self._namespace, labels=labels)
                async for endpoint_slice in listing:
                    slices[endpoint_slice.metadata.name] = endpoint_slice
                self._publish_slices(target, slices)
                failures = 0
                # From the listing's version on, so nothing that changed in between is missed.
                version = _resource_version(listing)
                watch = client.watch(
                    EndpointSlice, namespace=self._namespace, labels=labels, server_timeout=WATCH_SERVER_TIMEOUT_S,
                    resource_version=version,
                )  # fmt: skip
                # lightkube reopens a watch the server ended (from the last version seen) and lists no
                # more; an expired version (410 Gone) comes out of it as an ApiError: list again below.
                async with asyncio.timeout(self._watch_deadline_s):
                    async for event, endpoint_slice in watch:
                        if event == "DELETED":
                            slices.pop(endpoint_slice.metadata.name, None)
                        elif event in ("ADDED", "MODIFIED"):
                            slices[endpoint_slice.metadata.name] = endpoint_slice
                        else:
                            continue
                        self._publish_slices(target, slices)
            except asyncio.CancelledError:
                raise
            except TimeoutError:  # the watch's deadline: list again now, it is no failure
                _log.info("EndpointSlices of %s: watch open %.0f s, listing again", target, self._watch_deadline_s)
                continue
            except Exception as error:  # the API server or the network: keep the last state, list again
                failures += 1
                delay_s = self._rng.uniform(0.0, min(WATCH_RETRY_MAX_S, WATCH_RETRY_BASE_S * 2.0 ** min(failures, 16)))
                _log.warning("EndpointSlices of %s: %s; listing again in %.1f s", target, error, delay_s)
                await asyncio.sleep(delay_s)

    def _publish_slices(self, target: Endpoint, slices: Mapping[str, Any]) -> None:
        snapshot = snapshot_of_slices(target, slices.values())
        self._publish(target, snapshot)


def _resource_version(listing: Any) -> str | None:
    """The resource version a finished listing was read at (None if the server named none)."""
    try:
        return listing.resourceVersion or None
    except Exception:  # lightkube raises NotReadyError when the server sent no version
        return None


def _in_cluster_client() -> Any:
    """lightkube's async client from the pod's ServiceAccount (or KUBECONFIG outside a cluster)."""
    from lightkube import AsyncClient

    return AsyncClient()
