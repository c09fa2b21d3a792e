"""CATALOG.md lists exactly the metrics the services register, each with its type."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from libs.jobs.metrics import JobMetrics
from libs.prewarm.warmer import prewarm_sentences_counter
from libs.telemetry.metrics import AcousticMetrics, GatewayMetrics, VocoderMetrics
from libs.telemetry.process import register_process_metrics
from libs.upstream.metrics import RoutingMetrics
from tests.unit.test_telemetry_dashboard import load_catalog


def registered(registry: CollectorRegistry) -> dict[str, str]:
    """Metric name (as scraped, counters with _total) -> type, from the registry's own description."""
    names: dict[str, str] = {}
    for family in registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        names[name] = family.type
    return names


def test_catalogue_matches_the_metrics_each_service_registers() -> None:
    gateway = GatewayMetrics()
    RoutingMetrics(gateway.registry)
    JobMetrics(gateway.registry)  # with --job-runners, or jobs accepted
    prewarm_sentences_counter(gateway.registry)  # with a hot-text list or promotion
    gateway.track_endpoints(list)
    services = [gateway.registry, AcousticMetrics().registry, VocoderMetrics().registry]
    exported: dict[str, str] = {}
    for registry in services:
        register_process_metrics(registry)
        exported |= registered(registry)
    catalog = load_catalog()
    # Process metrics beyond RSS (CPU, fds, ...) come with the standard collector and are not listed one by one.
    listed_process = {name for name in catalog if name.startswith("process_")}
    ours = {name: kind for name, kind in exported.items() if not name.startswith("process_") or name in listed_process}
    assert set(ours) == set(catalog), (sorted(set(ours) - set(catalog)), sorted(set(catalog) - set(ours)))
    for name, kind in ours.items():
        assert catalog[name]["type"] == kind, name


def test_a_worker_names_one_precision_the_last_it_was_told() -> None:
    metrics = VocoderMetrics()
    metrics.serving_precision("fp32")
    metrics.serving_precision("bf16")
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value for family in metrics.registry.collect() for sample in family.samples}
    served = {labels: value for (name, labels), value in samples.items() if name == "tts_vocoder_precision"}
    assert served == {(("precision", "bf16"),): 1.0}
