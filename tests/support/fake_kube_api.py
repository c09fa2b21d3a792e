"""A small Kubernetes API server for the gateway's EndpointSlice discovery, over real HTTP.

No kube-apiserver installs on these machines (Debian has etcd but no kube-apiserver, and no PyPI
wheel ships one), so this serves what the gateway reads, as the API server does:

- the EndpointSlice list and watch of a namespace (label selector, resourceVersion, watch events as
  JSON lines, a watch from an old version replayed from the server's history);
- authentication by bearer token and authorisation by the RBAC rules of the manifests
  (k8s/components/endpointslice-discovery/rbac.yaml: the Role bound to the gateway's ServiceAccount),
  answering 401 and 403 with a Status as the API server does;
- the faults a watch meets: history compacted (a watch from an expired version gets a 410 Gone
  ERROR event; open watches get one too), watches dropped without a word, a server that answers
  slowly, and one that stops answering an open watch without closing it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.support.faults.toy_mesh import wait_until

RBAC = Path(__file__).resolve().parents[2] / "k8s" / "components" / "endpointslice-discovery" / "rbac.yaml"
GROUP, RESOURCE = "discovery.k8s.io", "endpointslices"


@dataclass(frozen=True)
class Rule:
    """One rule of a Role."""

    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]


@dataclass
class Rbac:
    """Who may do what in a namespace: ServiceAccount name -> the rules of the Roles bound to it."""

    namespace: str
    rules: dict[str, list[Rule]] = field(default_factory=dict)

    @classmethod
    def from_manifest(cls, namespace: str, path: Path = RBAC) -> Rbac:
        """The Roles and RoleBindings of `path`, applied in `namespace` (as kustomize places them)."""
        docs = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
        roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Role"}
        rbac = cls(namespace)
        for binding in (doc for doc in docs if doc["kind"] == "RoleBinding"):
            role = roles[binding["roleRef"]["name"]]
            for subject in binding["subjects"]:
                if subject["kind"] == "ServiceAccount":
                    rbac.rules.setdefault(subject["name"], []).extend(
                        Rule(frozenset(rule["apiGroups"]), frozenset(rule["resources"]), frozenset(rule["verbs"])) for rule in role["rules"]
                    )
        return rbac

    def allows(self, account: str, namespace: str, group: str, resource: str, verb: str) -> bool:
        return namespace == self.namespace and any(
            group in rule.api_groups and resource in rule.resources and verb in rule.verbs for rule in self.rules.get(account, [])
        )


class FakeApiServer:
    """EndpointSlices of one namespace, listed and watched over HTTP, behind RBAC."""

    def __init__(self, namespace: str, tokens: dict[str, str], rbac: Rbac | None = None) -> None:
        """`tokens`: bearer token -> ServiceAccount name (in `namespace`)."""
        self.namespace = namespace
        self.tokens = tokens
        self.rbac = rbac or Rbac.from_manifest(namespace)
        self.slices: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.history: list[tuple[int, dict[str, Any]]] = []
        """Every event with the version it made, for watches that start from an older version."""
        self.compacted_to = 0
        """Watches from a version older than this get 410 Gone (the API server's compaction)."""
        self.requests: list[tuple[str, str, str, str]] = []
        """(account, namespace, resource path, verb) of every request, allowed or not."""
        self.refused: list[tuple[str, int]] = []
        self.watches: list[asyncio.Queue[dict[str, Any] | None]] = []
        self.watch_versions: list[str | None] = []
        self.list_versions: list[str] = []
        self.delay_s = 0.0
        """Every answer waits this long first (a slow API server)."""
        self.hang_watches = False
        """New watches are accepted and then never sent anything nor closed (a server gone quiet)."""
        self.app = Starlette(routes=[
            Route("/apis/{group}/v1/namespaces/{namespace}/{resource}", self._collection),
            Route("/apis/{group}/v1/namespaces/{namespace}/{resource}/{name}", self._item),
        ])  # fmt: skip

    # ---- what a test changes

    def apply(self, endpoint_slice: dict[str, Any], event: str = "MODIFIED") -> None:
        self.version += 1
        endpoint_slice["metadata"]["resourceVersion"] = str(self.version)
        name = endpoint_slice["metadata"]["name"]
        if event == "DELETED":
            self.slices.pop(name, None)
        else:
            event = event if name in self.slices else "ADDED"
            self.slices[name] = endpoint_slice
        message = {"type": event, "object": endpoint_slice}
        self.history.append((self.version, message))
        for queue in self.watches:
            queue.put_nowait(message)

    def compact(self) -> None:
        """Drop the history up to now: open watches get 410 Gone, as do new ones from an older version."""
        self.compacted_to = self.version
        self.history.clear()
        gone = {"type": "ERROR", "object": _status(410, "Expired", "too old resource version")}
        for queue in self.watches:
            queue.put_nowait(gone)

    def drop_watches(self) -> None:
        """End every open watch without an error (a connection the API server or a proxy closed)."""
        for queue in self.watches:
            queue.put_nowait(None)
        self.watches.clear()

    # ---- the API

    async def _collection(self, request: Request) -> Any:
        watch = request.query_params.get("watch") in ("true", "1")
        refused = await self._authorise(request, "watch" if watch else "list")
        if refused is not None:
            return refused
        selector = request.query_params.get("labelSelector", "")
        wanted = dict(part.split("=", 1) for part in selector.split(",") if part)

        def matches(endpoint_slice: dict[str, Any]) -> bool:
            labels = endpoint_slice["metadata"]["labels"]
            return all(labels.get(key) == value for key, value in wanted.items())

        if not watch:
            items = [item for item in self.slices.values() if matches(item)]
            self.list_versions.append(str(self.version))
            body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSliceList", "metadata": {"resourceVersion": str(self.version)}, "items": items}
            return JSONResponse(body)
        since = request.query_params.get("resourceVersion")
        self.watch_versions.append(since)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        if since and int(since) < self.compacted_to:
            queue.put_nowait({"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} ({self.compacted_to})")})
            queue.put_nowait(None)
        elif not self.hang_watches:  # a hung watch is accepted and then sent nothing, not even what it missed
            for version, message in self.history:
                if since and version > int(since):
                    queue.put_nowait(message)
            self.watches.append(queue)

        async def events() -> AsyncIterator[bytes]:
            while (event := await queue.get()) is not None:
                if event["type"] == "ERROR" or matches(event["object"]):
                    yield (json.dumps(event) + "\n").encode()

        return StreamingResponse(events(), media_type="application/json")

    async def _item(self, request: Request) -> Any:
        refused = await self._authorise(request, "get")
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name not in self.slices:
            return JSONResponse(_status(404, "NotFound", f'endpointslices "{name}" not found'), status_code=404)
        return JSONResponse(self.slices[name])

    async def _authorise(self, request: Request, verb: str) -> JSONResponse | None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        header = request.headers.get("authorization", "")
        account = self.tokens.get(header.removeprefix("Bearer ").strip()) if header.startswith("Bearer ") else None
        group, namespace, resource = (request.path_params[key] for key in ("group", "namespace", "resource"))
        self.requests.append((account or "", namespace, f"{group}/{resource}", verb))
        if account is None:
            self.refused.append((verb, 401))
            return JSONResponse(_status(401, "Unauthorized", "Unauthorized"), status_code=401)
        if not self.rbac.allows(account, namespace, group, resource, verb):
            self.refused.append((verb, 403))
            user = f"system:serviceaccount:{self.namespace}:{account}"
            message = f'{resource}.{group} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}" in the namespace "{namespace}"'
            return JSONResponse(_status(403, "Forbidden", message), status_code=403)
        return None


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def free_port_on(host: str) -> int:
    """A TCP port of `host` (a loopback address) nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RunningApiServer:
    """`FakeApiServer` served by uvicorn on a free loopback port for the duration of an `async with`."""

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.port = free_port_on("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(fake.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"))
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunningApiServer:
        self._task = asyncio.create_task(self._server.serve())
        await wait_until(lambda: self._server.started, timeout_s=10)
        return self

    async def __aexit__(self, *_: object) -> None:
        self.fake.drop_watches()
        self._server.should_exit = True
        self._server.force_exit = True
        assert self._task is not None
        await self._task
