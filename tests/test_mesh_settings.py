"""Flags, env fallbacks and defaults of every service come from libs/mesh/settings.py."""

from __future__ import annotations

import pytest

from libs.mesh.settings import FLAGS, GatewaySettings, WorkerSettings, build_parser, load_settings


def test_default_ports_per_service() -> None:
    ports = {service: load_settings(service, [], environ={}).port for service in ("gateway", "acoustic", "vocoder")}
    metrics = {service: load_settings(service, [], environ={}).metrics_port for service in ("gateway", "acoustic", "vocoder")}
    assert ports == {"gateway": 50051, "acoustic": 50052, "vocoder": 50053}
    assert metrics == {"gateway": 9101, "acoustic": 9102, "vocoder": 9103}


def test_env_fills_in_and_flag_overrides_env() -> None:
    env = {"TTS_PORT": "6000", "TTS_ZONE": "zone-b", "TTS_THREADS": "2", "TTS_DEVICE": "cuda"}
    from_env = load_settings("acoustic", [], environ=env)
    assert isinstance(from_env, WorkerSettings)
    assert (from_env.port, from_env.zone, from_env.threads, from_env.device) == (6000, "zone-b", 2, "cuda")
    from_flag = load_settings("acoustic", ["--port", "7000", "--zone", "zone-c"], environ=env)
    assert (from_flag.port, from_flag.zone) == (7000, "zone-c")


def test_gateway_endpoints_repeat_as_flags_or_comma_separate_in_env() -> None:
    env = {"TTS_ACOUSTIC": "a=10.0.0.1:1,b=10.0.0.2:2", "TTS_VOCODER": "a=10.0.0.3:3"}
    from_env = load_settings("gateway", [], environ=env)
    assert isinstance(from_env, GatewaySettings)
    assert [(e.zone, e.address) for e in from_env.acoustic] == [("a", "10.0.0.1:1"), ("b", "10.0.0.2:2")]
    from_flags = load_settings(
        "gateway", ["--acoustic", "z=h1:5", "--acoustic", "y=h2:6", "--vocoder", "z=h3:7"], environ=env
    )
    assert [e.address for e in from_flags.acoustic] == ["h1:5", "h2:6"]
    assert [e.address for e in from_flags.vocoder] == ["h3:7"]


def test_gateway_defaults_point_at_local_workers_and_redis() -> None:
    settings = load_settings("gateway", [], environ={})
    assert isinstance(settings, GatewaySettings)
    assert [str(e) for e in settings.acoustic] == ["acoustic:local=127.0.0.1:50052"]
    assert [str(e) for e in settings.vocoder] == ["vocoder:local=127.0.0.1:50053"]
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert (settings.cache_ttl_s, settings.max_text_chars) == (300, 5000)
    assert load_settings("gateway", [], environ={"REDIS_URL": "redis://cache:6380/1"}).redis_url == "redis://cache:6380/1"


def test_bad_endpoint_and_bad_env_value_exit_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="no zone"):
        load_settings("gateway", ["--acoustic", "127.0.0.1:50052"], environ={})
    with pytest.raises(SystemExit):
        load_settings("acoustic", [], environ={"TTS_PORT": "eighty"})
    assert "TTS_PORT" in capsys.readouterr().err


def test_every_flag_names_its_env_var_in_help() -> None:
    for service, specs in FLAGS.items():
        help_text = build_parser(service, environ={}).format_help()
        for spec in specs:
            assert spec.flag in help_text and spec.env in help_text, (service, spec.flag)


def test_audio_heads_default_to_200_ms_and_reject_nonsense() -> None:
    assert load_settings("gateway", [], environ={}).audio_head_ms == 200.0
    assert load_settings("gateway", ["--audio-head-ms", "0"], environ={}).audio_head_ms == 0.0
    assert load_settings("gateway", [], environ={"TTS_AUDIO_HEAD_MS": "120"}).audio_head_ms == 120.0
    for bad in ("-1", "60000"):
        with pytest.raises(SystemExit, match="--audio-head-ms must be between 0 and"):
            load_settings("gateway", ["--audio-head-ms", bad], environ={})
