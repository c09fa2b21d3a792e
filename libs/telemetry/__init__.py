"""Telemetry shared by the three services: OpenTelemetry tracing and Prometheus process metrics.

See CATALOG.md beside this file for every metric name, type, label and unit.
"""
