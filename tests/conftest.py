"""Shared pytest fixtures: the .NET debuggee harness (tests/harness)."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The package under test is the repository's own sosext, wherever pytest is started from.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import DEFAULT_TFM, Debuggee, DebuggeeFactory, build_debuggee, dotnet_path

# Heap index files of the tests' cores go to a private directory that goes away with the run,
# not into the user's ~/.cache (every sosext process the tests start inherits this).
_INDEX_DIR = tempfile.mkdtemp(prefix="sosext-test-index-")
os.environ["SOSEXT_INDEX_DIR"] = _INDEX_DIR
atexit.register(shutil.rmtree, _INDEX_DIR, True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tfm", default=DEFAULT_TFM,
                     help="target framework of the debuggees: net8.0, net9.0 or net10.0 (default %(default)s)")


@pytest.fixture(scope="session")
def tfm(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--tfm"))


@pytest.fixture(scope="session")
def dotnet() -> str:
    """The dotnet host; tests that need a debuggee are skipped without one."""
    path = dotnet_path()
    if path is None:
        pytest.skip("dotnet is not on PATH: debuggee tests need the .NET SDK")
    return path


@pytest.fixture(scope="session")
def debuggee_dll(dotnet: str, tfm: str) -> Path:
    """The debuggee built for --tfm (once per source hash, shared by parallel test processes)."""
    return build_debuggee(tfm)


@pytest.fixture
def debuggee_factory(debuggee_dll: Path, tfm: str, tmp_path: Path) -> Iterator[DebuggeeFactory]:
    """Starts debuggees for one test and stops them all (by pid) when it ends.

        d = debuggee_factory("heap", gc="svr", gc_flavor="segments")   # started, d.truth loaded
        core = d.write_core("heap")

    Arguments are those of Debuggee plus `timeout` for start(). Cores and logs go to a directory
    under tmp_path that is deleted at teardown (cores are hundreds of MB): copy what must outlive the test.
    """
    started: list[Debuggee] = []
    core_dir = tmp_path / "debuggee"

    def start(scenario: str, *args: str | int, timeout: float = 120, **kwargs: Any) -> Debuggee:
        kwargs.setdefault("tfm", tfm)
        kwargs.setdefault("core_dir", core_dir)
        if kwargs["tfm"] == tfm:
            kwargs.setdefault("dll", debuggee_dll)
        d = Debuggee(scenario, *args, **kwargs)
        started.append(d)
        return d.start(timeout=timeout)

    try:
        yield start
    finally:
        for d in started:
            d.stop()
        shutil.rmtree(core_dir, ignore_errors=True)
