"""OpenTelemetry read in memory, for the telemetry tests: LiveKit's tracer provider set to
an SDK provider exporting spans into memory, and the process's global meter provider read
by an in-memory metric reader (the fixtures are in ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from livekit.agents.telemetry import set_tracer_provider, tracer
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

METRIC_READER = InMemoryMetricReader(
    preferred_temporality={
        Counter: AggregationTemporality.DELTA,
        Histogram: AggregationTemporality.DELTA,
    }
)
"""Reads the process's meter provider; delta: each read holds what was recorded since the
last one."""

METER_PROVIDER = MeterProvider(metric_readers=[METRIC_READER])
"""The global meter provider of the test process (OpenTelemetry takes one per process)."""


def metric_reader() -> InMemoryMetricReader:
    """:data:`METER_PROVIDER` as the global meter provider, read from here on."""
    if otel_metrics.get_meter_provider() is not METER_PROVIDER:
        otel_metrics.set_meter_provider(METER_PROVIDER)
    assert otel_metrics.get_meter_provider() is METER_PROVIDER, "another meter provider was set"
    METRIC_READER.get_metrics_data()  # forget what earlier tests recorded
    return METRIC_READER


def measurements(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Each instrument's data points, by instrument name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


@contextmanager
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """LiveKit's tracer provider set to an SDK provider exporting into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracer.set_provider(otel_trace.get_tracer_provider())
        provider.shutdown()
