"""Programs from Debian's archive that tests need: installed with apt when missing.

A fresh CI machine has apt and root but not every program; a test that needs one gets it
here instead of skipping (a skip would hide the gap). Without root or sudo the test fails
and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

APT_TIMEOUT = 900
"""Seconds allowed for ``apt-get update`` plus the install (another apt may hold the lock)."""


def debian_program(program: str, package: str) -> str:
    """The path of ``program``, installing Debian's ``package`` if it is missing."""
    found = shutil.which(program)
    if found:
        return found
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo"):
        prefix = ["sudo", "-n"]
    else:
        pytest.fail(f"{program} is missing and cannot be installed: not root and no sudo")
    apt = [*prefix, "apt-get", "-o", "DPkg::Lock::Timeout=600", "-qq"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = []
    for attempt in range(2):
        for command in (
            [*apt, "update"],
            [*apt, "install", "-y", "--no-install-recommends", package],
        ):
            result = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT, check=False
            )
            log.append(f"attempt {attempt + 1}: {' '.join(command)} -> {result.returncode}")
            log.append(result.stderr.strip()[-1500:])
        found = shutil.which(program)
        if found:
            return found
    pytest.fail(f"could not install {package} with apt:\n" + "\n".join(log))
