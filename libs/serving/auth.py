"""API keys at the gateway's door: who may call, how often, and how many streams at once.

`ApiKeyGate.admit(authorization, stream=...)` is the whole check, on the value of an
`authorization: Bearer <key>` header, so any front door can call it: the gRPC door through
`ApiKeyInterceptor` (below), an HTTP door with the header it parsed. It returns a `Grant` to release
when the call ends, or raises `Refusal`:

- no key, a malformed header, or a key that is not in the keys file: unauthenticated (gRPC
  UNAUTHENTICATED; the message says how to send a key and never repeats what was sent);
- the key's token bucket is empty (`rate_per_s` on average, `burst` at once) or it holds
  `max_streams` open streams: quota (gRPC RESOURCE_EXHAUSTED with a `grpc-retry-pushback-ms`
  trailer and a message that says when to retry).

Each key has its own bucket and stream count, so a key over its quota is refused in microseconds
without touching what other keys get. grpc.health.v1 stays open (probes carry no key). ListVoices
needs a key and costs a token like any call, but holds no stream.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc

from libs.serving.keys import MAX_KEY_CHARS, KeysFile, StoredKey, hash_key
from libs.settings.fields import setting
from libs.wire.headers import PUSHBACK_METADATA_KEY

_log = logging.getLogger(__name__)

AUTHORIZATION_METADATA_KEY: Final = "authorization"
BEARER: Final = "bearer"
OPEN_METHOD_PREFIXES: Final = ("/grpc.health.v1.Health/",)
"""Methods anyone may call without a key."""
STREAM_RETRY_S: Final = 1.0
"""Retry hint for a key at its stream limit: when a stream ends is unknown; a sentence takes about this."""
DEFAULT_RATE_PER_S: Final = 10.0
DEFAULT_BURST: Final = 20.0
DEFAULT_MAX_STREAMS: Final = 8
DEFAULT_RELOAD_S: Final = 5.0

REASON_MISSING: Final = "missing_key"
REASON_MALFORMED: Final = "malformed_header"
REASON_UNKNOWN: Final = "unknown_key"
REASON_RATE: Final = "rate_limited"
REASON_STREAMS: Final = "stream_limit"
UNAUTHENTICATED_REASONS: Final = (REASON_MISSING, REASON_MALFORMED, REASON_UNKNOWN)

_HOW_TO_SEND: Final = "send it as the metadata `authorization: Bearer <key>`"


@dataclass(frozen=True)
class AuthSettings:
    """Who may use the gateway: API keys and their default limits."""

    api_keys_file: str = setting(
        "", env="TTS_API_KEYS_FILE",
        doc="file of hashed API keys, one JSON line each (python -m libs.serving.keys new); set, every call but health needs a key (empty: no keys asked)",
    )  # fmt: skip
    api_keys_reload_s: float = setting(
        DEFAULT_RELOAD_S, env="TTS_API_KEYS_RELOAD_S", unit="s", minimum=0,
        doc="how often a changed keys file is looked for; a change applies without a restart",
    )  # fmt: skip
    api_key_rate_per_s: float = setting(
        DEFAULT_RATE_PER_S, env="TTS_API_KEY_RATE_PER_S", unit="requests/s", minimum=0.001,
        doc="requests per second a key may make on average, unless its line says otherwise",
    )  # fmt: skip
    api_key_burst: float = setting(
        DEFAULT_BURST, env="TTS_API_KEY_BURST", unit="requests", minimum=1,
        doc="requests a key may make at once after a quiet spell, unless its line says otherwise",
    )  # fmt: skip
    api_key_max_streams: int = setting(
        DEFAULT_MAX_STREAMS, env="TTS_API_KEY_MAX_STREAMS", unit="count", minimum=1,
        doc="synthesis streams a key may hold open at once, unless its line says otherwise",
    )  # fmt: skip

    @property
    def enabled(self) -> bool:
        """Whether callers need a key."""
        return bool(self.api_keys_file)


class Refusal(Exception):
    """A call the gate does not let in; `str()` is the message for the caller."""

    def __init__(self, reason: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        """One of the REASON_* words (the metric's label)."""
        self.retry_after_s = retry_after_s
        """When a retry can succeed, for quota refusals."""

    @property
    def unauthenticated(self) -> bool:
        """Whether the caller is unknown (as opposed to known and over its quota)."""
        return self.reason in UNAUTHENTICATED_REASONS


class TokenBucket:
    """`rate_per_s` tokens a second, at most `burst` held; a call takes one."""

    def __init__(self, rate_per_s: float, burst: float, now_s: float) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._tokens = burst
        self._updated_s = now_s

    def take(self, now_s: float) -> float:
        """Take a token: 0.0 if one was there, else the seconds until one will be (nothing taken)."""
        self._refill(now_s)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate_per_s

    def resized(self, rate_per_s: float, burst: float, now_s: float) -> TokenBucket:
        """The bucket with new limits, keeping what it holds (up to the new burst)."""
        self._refill(now_s)
        bucket = TokenBucket(rate_per_s, burst, now_s)
        bucket._tokens = min(burst, self._tokens)
        return bucket

    def _refill(self, now_s: float) -> None:
        self._tokens = min(self.burst, self._tokens + max(0.0, now_s - self._updated_s) * self.rate_per_s)
        self._updated_s = now_s


class Grant:
    """A call let in: release it when the call ends (releasing twice does nothing)."""

    def __init__(self, key_id: str, release: Callable[[], None] | None = None, tier: str = "") -> None:
        self.key_id = key_id
        """The id of the key the call came with."""
        self.tier = tier
        """The tier the key's requests that name none are spoken in ("": quality)."""
        self._release = release

    def release(self) -> None:
        """The call ended: give back its stream, if it held one."""
        release, self._release = self._release, None
        if release is not None:
            release()


class ApiKeyGate:
    """The keys of one gateway, their buckets and their open streams."""

    def __init__(
        self,
        keys: KeysFile,
        settings: AuthSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_refused: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self._keys = keys
        self._settings = settings
        self._clock = clock
        self._on_refused = on_refused
        self._buckets: dict[str, TokenBucket] = {}
        self._streams: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: AuthSettings, on_refused: Callable[[str], None] = lambda reason: None) -> ApiKeyGate | None:
        """The gate of `settings`, or None when no keys file is set (everyone may call). KeysFileError
        if the file cannot be read or parsed."""
        if not settings.enabled:
            return None
        return cls(KeysFile(settings.api_keys_file, settings.api_keys_reload_s), settings, on_refused=on_refused)

    def admit(self, authorization: str | None, *, stream: bool) -> Grant:
        """Let a call in or raise Refusal: `authenticate`, then `take`."""
        return self.take(self.authenticate(authorization), stream=stream)

    def authenticate(self, authorization: str | None) -> StoredKey:
        """The key of an `authorization` header value (None when absent), or Refusal (unauthenticated)."""
        try:
            return self._key_of(authorization)
        except Refusal as refusal:
            self._on_refused(refusal.reason)
            raise

    def take(self, key: StoredKey, *, stream: bool) -> Grant:
        """Charge a call to `key` or raise Refusal (over quota); a `stream` call holds one of the
        key's streams until the grant is released."""
        try:
            return self._take(key, stream)
        except Refusal as refusal:
            self._on_refused(refusal.reason)
            raise

    def _key_of(self, authorization: str | None) -> StoredKey:
        if authorization is None or not authorization.strip():
            raise Refusal(REASON_MISSING, f"this gateway needs an API key: {_HOW_TO_SEND}")
        scheme, _, key = authorization.strip().partition(" ")
        key = key.strip()
        if scheme.lower() != BEARER or not key or len(key) > MAX_KEY_CHARS:
            raise Refusal(REASON_MALFORMED, f"the authorization metadata is not a bearer API key: {_HOW_TO_SEND}")
        stored = self._keys.keys().get(hash_key(key))
        if stored is None:
            raise Refusal(REASON_UNKNOWN, "the API key is not valid (unknown or revoked); ask for a new one")
        return stored

    def _take(self, key: StoredKey, stream: bool) -> Grant:
        now_s = self._clock()
        max_streams = key.max_streams or self._settings.api_key_max_streams
        open_streams = self._streams.get(key.sha256, 0)
        if stream and open_streams >= max_streams:
            raise Refusal(
                REASON_STREAMS,
                f"API key {key.key_id} has {open_streams} streams open, its limit; retry when one ends "
                f"(in about {STREAM_RETRY_S:g} s)",
                STREAM_RETRY_S,
            )
        wait_s = self._bucket(key, now_s).take(now_s)
        if wait_s > 0:
            bucket = self._buckets[key.sha256]
            raise Refusal(
                REASON_RATE,
                f"API key {key.key_id} is over its rate of {bucket.rate_per_s:g} requests/s (burst {bucket.burst:g}); "
                f"retry in {_rounded_up(wait_s)} s",
                wait_s,
            )
        if not stream:
            return Grant(key.key_id, tier=key.tier or "")
        self._streams[key.sha256] = open_streams + 1
        return Grant(key.key_id, lambda: self._stream_ended(key.sha256), key.tier or "")

    def _bucket(self, key: StoredKey, now_s: float) -> TokenBucket:
        rate_per_s = key.rate_per_s or self._settings.api_key_rate_per_s
        burst = key.burst or self._settings.api_key_burst
        bucket = self._buckets.get(key.sha256)
        if bucket is None:
            bucket = self._buckets[key.sha256] = TokenBucket(rate_per_s, burst, now_s)
        elif (bucket.rate_per_s, bucket.burst) != (rate_per_s, burst):  # the keys file changed its limits
            bucket = self._buckets[key.sha256] = bucket.resized(rate_per_s, burst, now_s)
        return bucket

    def _stream_ended(self, sha256: str) -> None:
        left = self._streams.get(sha256, 0) - 1
        if left > 0:
            self._streams[sha256] = left
        else:
            self._streams.pop(sha256, None)

    def open_streams(self, key_id: str) -> int:
        """Streams the key `key_id` holds now."""
        return sum(count for sha256, count in self._streams.items() if self._id_of(sha256) == key_id)

    def _id_of(self, sha256: str) -> str | None:
        key = self._keys.keys().get(sha256)
        return key.key_id if key is not None else None


def _rounded_up(seconds: float) -> str:
    """Seconds as a message shows them: 0.1 s steps, never 0."""
    return f"{max(0.1, math.ceil(seconds * 10) / 10):g}"


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Runs the gate on every call but health checks. A caller without a valid key is refused before
    its request is even parsed; the quota is charged when the call's handler starts, so a stream is
    counted only while its handler runs and always given back."""

    def __init__(self, gate: ApiKeyGate) -> None:
        self._gate = gate

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        authorization = _metadata_value(handler_call_details.invocation_metadata, AUTHORIZATION_METADATA_KEY)
        try:
            key = self._gate.authenticate(authorization)
        except Refusal as refusal:
            return _refusing(handler, refusal)
        return _charging(handler, self._gate, key)


def _metadata_value(metadata: Any, key: str) -> str | None:
    for name, value in metadata or ():
        if name == key:
            return value if isinstance(value, str) else None
    return None


def status_of(refusal: Refusal) -> tuple[grpc.StatusCode, tuple[tuple[str, str], ...]]:
    """The gRPC status and trailing metadata of a refusal."""
    if refusal.unauthenticated:
        return grpc.StatusCode.UNAUTHENTICATED, ()
    pushback_ms = str(math.ceil((refusal.retry_after_s or 0.0) * 1000))
    return grpc.StatusCode.RESOURCE_EXHAUSTED, ((PUSHBACK_METADATA_KEY, pushback_ms),)


def _refusing(handler: grpc.RpcMethodHandler, refusal: Refusal) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour replaced by the refusal, and its request left unparsed."""
    code, trailers = status_of(refusal)

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, str(refusal), trailing_metadata=trailers)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort(code, str(refusal), trailing_metadata=trailers)
        yield  # never reached: an async generator, as grpc expects of a streaming behaviour

    behaviour = "unary_unary"
    for name in ("unary_stream", "stream_unary", "stream_stream"):
        if getattr(handler, name):
            behaviour = name
    refusing = refuse_stream if behaviour in ("unary_stream", "stream_stream") else refuse
    return handler._replace(**{behaviour: refusing}, request_deserializer=None)


def _charging(handler: grpc.RpcMethodHandler, gate: ApiKeyGate, key: StoredKey) -> grpc.RpcMethodHandler:
    """`handler` whose behaviour first charges `key` (refusing when it is over quota) and gives its
    stream back when it ends, however it ends."""
    stream = bool(handler.unary_stream or handler.stream_stream)
    for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behaviour = getattr(handler, name)
        if behaviour is not None:
            return handler._replace(**{name: _charged(behaviour, gate, key, stream)})
    return handler


CALLER_KEY: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar("tts_caller_key", default=None)
"""The id of the API key the call being handled came with (None: keys are off). Limits that count per
client count a key as one client, wherever its calls come from (libs.serving.clients)."""
CALLER_TIER: Final[contextvars.ContextVar[str]] = contextvars.ContextVar("tts_caller_tier", default="")
"""The tier the API key of the call being handled speaks in when its request names none ("": quality)."""


def _charged(behaviour: Callable[..., Any], gate: ApiKeyGate, key: StoredKey, stream: bool) -> Callable[..., Any]:
    async def charge(context: grpc.aio.ServicerContext) -> Grant:
        try:
            return gate.take(key, stream=stream)
        except Refusal as refusal:
            code, trailers = status_of(refusal)
            await context.abort(code, str(refusal), trailing_metadata=trailers)
            raise  # abort raises; this line is for the type checker

    if inspect.isasyncgenfunction(behaviour):

        async def charged_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            grant = await charge(context)
            CALLER_KEY.set(grant.key_id)  # the handler's own task: nothing else sees it
            CALLER_TIER.set(grant.tier)
            try:
                async for response in behaviour(request, context):
                    yield response
            finally:
                grant.release()

        return charged_stream

    async def charged_call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        grant = await charge(context)
        CALLER_KEY.set(grant.key_id)
        CALLER_TIER.set(grant.tier)
        try:
            return await behaviour(request, context)
        finally:
            grant.release()

    return charged_call
