"""The tiers of a voice at the gateway: what a request may ask for, the errors that name the field,
the audio heads each tier keeps apart in the cache, the resume tokens that go on in the tier they
were spoken in, and admission that weighs a fast listener by what it costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from libs.cache.keys import cache_key, head_key, head_keys
from libs.pb.tts.v1 import tts_pb2
from libs.synthesis.admission import Listener, RealtimeAdmission, keeps_playing
from libs.synthesis.options import resolve_options, with_default_tier, with_resume
from libs.synthesis.resume import ResumePoint, encode_token, sentence_digest
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.voice.registry import VoiceRegistry, default_registry
from libs.voice.tiers import AUTO, FAST, QUALITY, tier_enum, tier_of_enum, tier_of_name
from libs.wire.errors import InvalidRequestError


def _registry(*, fast: bool) -> VoiceRegistry:
    voice = default_registry().default
    return VoiceRegistry([replace(voice, tiers=(QUALITY, FAST) if fast else (QUALITY,))], voice.name)


def _options(registry: VoiceRegistry, tier: str = "", resume_token: str = ""):  # type: ignore[no-untyped-def]
    return resolve_options(registry, voice="", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=0, speaker_id=0,
                           request_id="", include_alignment=False, tier=tier, resume_token=resume_token)  # fmt: skip


def test_a_request_names_a_tier_by_enum_or_by_name_and_an_unknown_one_names_the_field() -> None:
    assert [tier_of_enum(value) for value in (0, 1, 2, 3)] == ["", QUALITY, FAST, AUTO]
    assert all(tier_of_enum(tier_enum(tier)) == tier for tier in (QUALITY, FAST, AUTO))
    assert [tier_of_name(name) for name in ("", "quality", "Fast", " auto ")] == ["", QUALITY, FAST, AUTO]
    with pytest.raises(InvalidRequestError) as by_enum:
        tier_of_enum(7)
    assert by_enum.value.field == "tier" and "TIER_FAST" in str(by_enum.value)
    with pytest.raises(InvalidRequestError) as by_name:
        tier_of_name("turbo")
    assert by_name.value.field == "tier" and "'turbo'" in str(by_name.value) and "quality, fast or auto" in str(by_name.value)


def test_the_fast_tier_of_a_voice_without_one_is_refused_and_auto_is_not() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        _options(_registry(fast=False), FAST)
    assert caught.value.field == "tier" and "has no fast tier" in str(caught.value)
    assert _options(_registry(fast=False), AUTO).tier == AUTO
    assert _options(_registry(fast=True), FAST).tier == FAST


def test_each_tier_keeps_its_own_audio_head_in_the_slot_of_the_sentence() -> None:
    key = cache_key(SynthesisInputs("v1", "voice", [1, 2, 3], SynthesisParams()))
    quality, fast = head_key(key), head_key(key, FAST)
    assert head_key(key, QUALITY) == quality == key.replace("tts:mel:", "tts:head:")  # as before there were tiers
    assert fast != quality
    tag = key[key.index("{") :]
    assert quality.endswith(tag) and fast.endswith(tag), "both heads hash to the slot of the mel"
    assert set(head_keys(key)) == {quality, fast}


def test_a_stream_resumes_in_the_tier_it_was_spoken_in() -> None:
    registry = _registry(fast=True)
    point = ResumePoint(1, 100, 5000, sentence_digest("x"))
    quality_token = encode_token(point, replace(_options(registry), tier=QUALITY).digest)
    fast_token = encode_token(point, replace(_options(registry), tier=FAST).digest)
    assert quality_token != fast_token
    # Asked for none or auto, the token says which tier goes on.
    assert with_resume(_options(registry), fast_token).tier == FAST
    assert with_resume(_options(registry, AUTO), fast_token).tier == FAST
    assert with_resume(_options(registry, AUTO), quality_token).tier == QUALITY
    # A token of the other tier is another stream's.
    with pytest.raises(InvalidRequestError) as caught:
        with_resume(_options(registry, QUALITY), fast_token)
    assert caught.value.field == "resume_token" and "tier" in str(caught.value)
    # A quality token reads as it did before there were tiers.
    assert replace(_options(registry), tier=QUALITY).digest == _options(registry).digest


def test_a_listener_is_weighed_by_what_its_audio_costs() -> None:
    # Two quality listeners fill a mesh that makes 2.5 audio s per s; fast ones cost 0.4 each.
    assert not keeps_playing([(0.0, 10.0, 1.0)] * 3, rate=2.5)
    assert keeps_playing([(0.0, 10.0, 1.0)] * 2 + [(0.0, 10.0, 0.4)], rate=2.5)
    assert not keeps_playing([(0.0, 10.0, 1.0)] * 2 + [(0.0, 10.0, 0.4)] * 2, rate=2.5)
    assert keeps_playing([(0.0, 10.0, 0.4)] * 6, rate=2.5)
    assert keeps_playing([(0.0, 10.0)] * 2, rate=2.0) == keeps_playing([(0.0, 10.0, 1.0)] * 2, rate=2.0)
    admission = RealtimeAdmission(lambda: 1.5, lambda: 0, headroom=1.0)
    assert admission.refusal("a", 10.0) is None
    admission.add(Listener("a", 10.0))
    assert admission.refusal("b", 10.0) is not None
    assert admission.refusal("b", 10.0, cost=0.4) is None


def test_a_keys_default_tier_applies_only_where_the_request_names_none() -> None:
    fast_voice, plain_voice = _registry(fast=True), _registry(fast=False)
    assert with_default_tier(_options(fast_voice), FAST).tier == FAST
    assert with_default_tier(_options(fast_voice, QUALITY), FAST).tier == QUALITY, "the request's own tier wins"
    assert with_default_tier(_options(plain_voice), FAST).tier == QUALITY, "a default is no demand: no error"
    assert with_default_tier(_options(plain_voice), AUTO).tier == AUTO
    assert with_default_tier(_options(fast_voice), "").tier == ""
