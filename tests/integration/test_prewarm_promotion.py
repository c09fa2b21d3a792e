"""Promotion counts on a real Redis: requests for a sentence within the window promote it even where a
counting window ends between them, and requests further apart than two windows do not add up."""

from __future__ import annotations

import redis.asyncio as aioredis

from libs.prewarm.promotion import Promoter

VOICE = "en_US-joe-medium"
WINDOW_S = 30.0


class Clock:
    """Wall-clock seconds the test moves by hand."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


async def test_requests_within_the_window_are_promoted_across_a_window_boundary(redis_server) -> None:  # type: ignore[no-untyped-def]
    client = aioredis.Redis.from_url(redis_server.url)
    clock = Clock(100 * WINDOW_S - 1.0)  # one second before a window ends
    promoter = Promoter(client, promote_after=3, window_s=WINDOW_S, keep_s=600, clock=clock)
    try:
        for _ in range(2):
            promoter.count(VOICE, "Your parcel has been delivered.")
        promoter.count(VOICE, "Your parcel is delayed.")
        assert await promoter.flush() == []
        clock.now_s += 2.0  # the next window: the third request comes two seconds after the first
        promoter.count(VOICE, "Your parcel has been delivered.")
        assert await promoter.flush() == [f"{VOICE}\nYour parcel has been delivered."]
        assert await promoter.promoted() == [(VOICE, "Your parcel has been delivered.")]
        clock.now_s += 2 * WINDOW_S  # two windows on: the rare sentence's two requests no longer count
        promoter.count(VOICE, "Your parcel is delayed.")
        assert await promoter.flush() == []
        promoter.count(VOICE, "Your parcel is delayed.")
        promoter.count(VOICE, "Your parcel is delayed.")
        assert await promoter.flush() == [f"{VOICE}\nYour parcel is delayed."]
    finally:
        await client.aclose()
