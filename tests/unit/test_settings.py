"""Every flag and environment variable of every service is declared once (libs.settings) and read
by one loader: flag beats environment beats default, and bad values stop the process with a message
that names the flag and the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from libs.settings.fields import settings_of
from services.settings import (
    SERVICE_SETTINGS,
    SERVICES,
    load_gateway_settings,
    load_worker_settings,
    markdown_table,
)

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def _load(service: str, argv: list[str], environ: dict[str, str]):  # type: ignore[no-untyped-def]
    return load_gateway_settings(argv, environ) if service == "gateway" else load_worker_settings(service, argv, environ)


def test_default_ports_per_service() -> None:
    ports = {service: _load(service, [], {}).server.port for service in SERVICES}
    metrics = {service: _load(service, [], {}).server.metrics_port for service in SERVICES}
    assert ports == {"gateway": 50051, "acoustic": 50052, "vocoder": 50053}
    assert metrics == {"gateway": 9101, "acoustic": 9102, "vocoder": 9103}


def test_env_fills_in_and_flag_overrides_env() -> None:
    env = {"TTS_PORT": "6000", "TTS_ZONE": "zone-b", "TTS_THREADS": "2", "TTS_DEVICE": "cuda", "TTS_MAX_STREAMS": "9"}
    from_env = load_worker_settings("acoustic", [], env)
    assert (from_env.server.port, from_env.server.zone, from_env.worker.threads, from_env.worker.device) == (6000, "zone-b", 2, "cuda")
    assert from_env.admission.max_streams == 9
    from_flag = load_worker_settings("acoustic", ["--port", "7000", "--zone", "zone-c", "--max-streams", "4"], env)
    assert (from_flag.server.port, from_flag.server.zone, from_flag.admission.max_streams) == (7000, "zone-c", 4)


def test_an_empty_variable_counts_as_unset() -> None:
    assert load_worker_settings("vocoder", [], {"TTS_ZONE": "", "TTS_PORT": " "}).server.zone == "local"


def test_gateway_endpoints_repeat_as_flags_or_comma_separate_in_env() -> None:
    env = {"TTS_ACOUSTIC": "a=10.0.0.1:1,b=10.0.0.2:2", "TTS_VOCODER": "a=10.0.0.3:3", "TTS_ZONE": "a"}
    from_env = load_gateway_settings([], env).upstream
    assert [(e.zone, e.address) for e in from_env.acoustic] == [("a", "10.0.0.1:1"), ("b", "10.0.0.2:2")]
    from_flags = load_gateway_settings(["--acoustic", "z=h1:5", "--acoustic", "y=h2:6", "--vocoder", "z=h3:7", "--zone", "z"], env).upstream
    assert [e.address for e in from_flags.acoustic] == ["h1:5", "h2:6"]
    assert [e.address for e in from_flags.vocoder] == ["h3:7"]


def test_gateway_defaults_point_at_local_workers_and_redis() -> None:
    settings = load_gateway_settings([], {})
    assert [str(e) for e in settings.upstream.acoustic] == ["acoustic:local=127.0.0.1:50052"]
    assert [str(e) for e in settings.upstream.vocoder] == ["vocoder:local=127.0.0.1:50053"]
    assert settings.cache.redis_url == "redis://127.0.0.1:6379/0"
    assert (settings.cache.ttl_s, settings.limits.max_text_chars, settings.limits.max_streams) == (300, 5000, 256)
    assert load_gateway_settings([], {"REDIS_URL": "redis://cache:6380/1"}).cache.redis_url == "redis://cache:6380/1"


def test_routing_knobs_reach_their_groups() -> None:
    env = {"TTS_ATTEMPT_TIMEOUT_S": "1.5", "TTS_GATEWAY_MAX_STREAMS": "7", "TTS_MAX_ATTEMPTS": "2", "TTS_RETRY_FLOOR_PER_S": "3"}
    settings = load_gateway_settings(["--ejection-base-s", "4"], env)
    assert settings.upstream.attempt_timeout_s == 1.5 and settings.limits.max_streams == 7
    assert settings.retry.max_attempts == 2 and settings.retry_budget.min_retries_per_s == 3.0
    assert settings.ejection.base_ejection_s == 4.0


@pytest.mark.parametrize(
    ("service", "argv", "environ", "message"),
    [
        ("gateway", ["--acoustic", "127.0.0.1:50052"], {}, "no zone"),
        ("acoustic", [], {"TTS_PORT": "eighty"}, "TTS_PORT='eighty' is not valid for --port"),
        ("gateway", [], {"TTS_MAX_ATTEMPTS": "three"}, "TTS_MAX_ATTEMPTS"),
        ("gateway", ["--audio-head-ms", "60000"], {}, r"--audio-head-ms \(TTS_AUDIO_HEAD_MS\) must be at most 5000"),
        ("gateway", ["--audio-head-ms", "-1"], {}, "must be at least 0"),
        ("vocoder", ["--precision", "fp8"], {}, "must be one of auto, fp32, bf16"),
        ("vocoder", [], {"TTS_THREADS": "0"}, r"--threads \(TTS_THREADS\) must be at least 1"),
        ("gateway", [], {"TTS_RETRY_BASE_BACKOFF_S": "2", "TTS_RETRY_MAX_BACKOFF_S": "1"}, "base_backoff_s <= max_backoff_s"),
        ("gateway", ["--acoustic", "a=h:1", "--acoustic", "b=h:1"], {}, "listed twice"),
    ],
)
def test_bad_values_stop_the_service_with_a_message_naming_what_to_fix(service, argv, environ, message) -> None:
    with pytest.raises(SystemExit, match=message):
        _load(service, argv, environ)


def test_batching_raises_the_inference_threads_to_the_batch() -> None:
    settings = load_worker_settings("vocoder", ["--max-batch", "8"], {}).worker
    assert (settings.inference_threads, settings.step_threads) == (2, 8)


def test_every_setting_has_a_flag_a_variable_a_doc_and_one_declaration() -> None:
    for service in SERVICES:
        declared = settings_of(SERVICE_SETTINGS[service], service)
        flags = [item.spec.flag for item in declared]
        envs = [item.spec.env for item in declared]
        assert len(set(flags)) == len(flags) and len(set(envs)) == len(envs), service
        for item in declared:
            assert re.fullmatch(r"--[a-z0-9-]+", item.spec.flag) and re.fullmatch(r"[A-Z][A-Z0-9_]*", item.spec.env)
            assert item.spec.doc, item


def test_every_flag_names_its_env_var_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    for service in SERVICES:
        with pytest.raises(SystemExit):
            _load(service, ["--help"], {})
        help_text = capsys.readouterr().out
        for item in settings_of(SERVICE_SETTINGS[service], service):
            assert item.spec.flag in help_text and item.spec.env in help_text, (service, item.spec.flag)


def test_settings_page_table_is_the_rendered_declaration() -> None:
    """`python -m services.settings` prints the table; docs/settings.md carries it between its markers."""
    text = SETTINGS_PAGE.read_text(encoding="utf-8")
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in text and end in text, "docs/settings.md lost its settings table markers"
    in_page = text.split(begin, 1)[1].split(end, 1)[0]
    assert in_page == markdown_table(), "docs/settings.md's settings table is stale: run `make docs`"
