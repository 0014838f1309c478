"""Integration suite glue: every test also fails if the adapter logged a failure.

The controllers run with ``strict=True``: an invariant breach raises inside the adapter,
which logs it (``turnfsm: controller failed ...``) instead of letting it escape into
LiveKit. So do failing levers and handlers. A test that passes its own assertions while
the adapter logged such a failure is still a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def adapter_logs_no_failure(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    yield
    failures = [
        f"{record.name} {record.levelname}: {record.getMessage()}"
        for record in caplog.get_records("call")
        if record.levelno >= logging.WARNING
        and (record.name.startswith("turnfsm") or record.getMessage().startswith("turnfsm:"))
    ]
    if failures:
        pytest.fail("the adapter logged failures:\n" + "\n".join(failures), pytrace=False)
