"""What the gateway measures of one client request, whichever door it came through."""

from __future__ import annotations

import time

from libs.telemetry import tracing
from libs.telemetry.metrics import GatewayMetrics


class RequestMeter:
    """Counts one request as in flight until `finished`, and records its voice, first audio, audio
    sent and outcome under `method` (a gRPC method name, or an HTTP route)."""

    def __init__(self, metrics: GatewayMetrics, method: str) -> None:
        self._metrics = metrics
        self._method = method
        self._started_s = time.monotonic()
        self._voice = ""
        self._last_audio_s: float | None = None
        self._open = True
        metrics.inflight_streams.inc()

    def voice(self, name: str) -> None:
        """The request asked for voice `name` (counted once the request is valid enough to say)."""
        self._voice = name
        self._metrics.voice_requests_total.labels(voice=name).inc()
        tracing.request_span().set_attribute(tracing.ATTR_VOICE, name)

    def sent(self, audio_duration_s: float) -> None:
        """A piece carrying `audio_duration_s` of audio is about to go to the client."""
        if audio_duration_s <= 0:
            return
        now_s = time.monotonic()
        if self._last_audio_s is None:
            first_audio_s = now_s - self._started_s
            self._metrics.time_to_first_audio_seconds.labels(method=self._method).observe(first_audio_s)
            tracing.record_time_to_first_audio(first_audio_s)
        self._last_audio_s = now_s
        self._metrics.audio_seconds_total.labels(voice=self._voice).inc(audio_duration_s)

    def finished(self, code: str) -> None:
        """The request ended with status `code` ("OK", "CANCELLED", "INVALID_ARGUMENT", ...); once only."""
        if not self._open:
            return
        self._open = False
        self._metrics.inflight_streams.dec()
        self._metrics.requests_total.labels(method=self._method, code=code).inc()
        if code == "OK" and self._last_audio_s is not None:
            self._metrics.synthesis_seconds.labels(method=self._method).observe(self._last_audio_s - self._started_s)
