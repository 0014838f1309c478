"""Fixtures of the telemetry tests: spans and metrics read in memory (``otel_memory``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_memory import metric_reader, span_exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans LiveKit's tracer (turnfsm's included) ends during the test."""
    with span_exporter() as exporter:
        yield exporter


@pytest.fixture
def reader() -> InMemoryMetricReader:
    """The measurements recorded on the global meter provider during the test."""
    return metric_reader()
