"""A real headless Chromium, driven over the DevTools protocol, for the report's page.

:func:`chromium` finds Debian's ``chromium`` or installs it with apt (support.debian);
if that is impossible the test fails, it never skips.
:func:`open_page` loads a page with the console and errors already watched, runs a
script in it and returns what the script returned with every console error seen, and
can take a screenshot of the page's top as it was then.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from support.debian import debian_program


def chromium() -> str:
    """The path of ``chromium``, installed from Debian's archive if missing."""
    return debian_program("chromium", "chromium")


@dataclass
class Page:
    """What the page showed: the script's value and every console error or exception."""

    value: Any = None
    errors: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Screenshot:
    """Where to save a PNG of the page's top, ``width`` × ``height`` CSS pixels."""

    path: Path
    width: int = 1280
    height: int = 2000


async def open_page(
    url: str, script: str, *, timeout: float = 60.0, screenshot: Screenshot | None = None
) -> Page:
    """Load ``url`` in headless Chromium, then evaluate ``script`` (an expression; a
    promise is awaited), then take the ``screenshot`` if asked."""
    with tempfile.TemporaryDirectory() as profile:
        process = await asyncio.create_subprocess_exec(
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            return await asyncio.wait_for(_drive(process, url, script, screenshot), timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def _drive(
    process: asyncio.subprocess.Process, url: str, script: str, screenshot: Screenshot | None
) -> Page:
    assert process.stderr is not None
    while True:
        line = (await process.stderr.readline()).decode(errors="replace")
        if not line:
            raise RuntimeError("chromium exited before its DevTools endpoint was up")
        if match := re.search(r"DevTools listening on ws://([^/]+)/", line):
            break
    drain = asyncio.ensure_future(process.stderr.read())  # keep the pipe from filling
    page = Page()
    ids = itertools.count(1)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://{match[1]}/json/list") as response:
                targets = await response.json()
            target = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:

                async def call(method: str, **params: Any) -> dict[str, Any]:
                    number = next(ids)
                    await ws.send_json({"id": number, "method": method, "params": params})
                    while True:
                        message = await ws.receive_json()
                        _watch(message, page)
                        if message.get("id") == number:
                            if "error" in message:
                                raise RuntimeError(f"{method}: {message['error']}")
                            return message.get("result", {})

                for domain in ("Runtime", "Log", "Page"):
                    await call(f"{domain}.enable")
                if screenshot is not None:
                    await call(
                        "Emulation.setDeviceMetricsOverride",
                        width=screenshot.width,
                        height=screenshot.height,
                        deviceScaleFactor=1,
                        mobile=False,
                    )
                await call("Page.navigate", url=url)
                while True:  # until the page has loaded
                    message = await ws.receive_json()
                    _watch(message, page)
                    if message.get("method") == "Page.loadEventFired":
                        break
                result = await call(
                    "Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True
                )
                if "exceptionDetails" in result:
                    page.errors.append(f"script: {result['exceptionDetails']}")
                page.value = result.get("result", {}).get("value")
                if screenshot is not None:
                    shot = await call("Page.captureScreenshot", format="png")
                    screenshot.path.write_bytes(base64.b64decode(shot["data"]))
    finally:
        drain.cancel()
    return page


def _watch(message: dict[str, Any], page: Page) -> None:
    method, params = message.get("method"), message.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(
            str(arg.get("value", arg.get("description", ""))) for arg in params["args"]
        )
        page.console.append(f"{params['type']}: {text}")
        if params["type"] in ("error", "assert"):
            page.errors.append(f"console.{params['type']}: {text}")
    elif method == "Runtime.exceptionThrown":
        page.errors.append(f"exception: {params['exceptionDetails']}")
    elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
        page.errors.append(f"log: {params['entry']['text']} ({params['entry'].get('url', '')})")
