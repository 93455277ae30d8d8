"""Without numba, the standalone analyzer walks big cores in two processes; the result must
be the very same heap index as one process's walk, down to every object and every line of
output. (The compiled walk runs in one process: see docs/design.md.)"""
from __future__ import annotations

import os
import subprocess

import pytest

import drivers
from harness import Debuggee, build_debuggee, dotnet_path

pytestmark = pytest.mark.slow


def analyze(core, cmds: list[str], workers: int) -> str:
    env = {**os.environ, "SOSEXT_WORKERS": str(workers), "SOSEXT_PARALLEL_MIN_BYTES": "0",
           "SOSEXT_KERNELS": "python", "SOSEXT_NO_INDEX_CACHE": "1"}
    args = [drivers.PYTHON, "-m", "sosext", "analyze", str(core)] + sum((["-c", c] for c in cmds), [])
    res = subprocess.run(args, cwd=drivers.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("scenario", [("heap",), ("bigheap", "300000", "mixed")], ids=["heap", "bigheap"])
def test_two_process_walk_equals_one_process_walk(scenario, tmp_path) -> None:
    if dotnet_path() is None:
        pytest.skip("dotnet is not on PATH: no debuggee can be built")
    with Debuggee(*scenario, dll=build_debuggee(), core_dir=tmp_path) as d:
        core = d.write_core("heap", tmp_path / "heap.core")
    cmds = ["dumpheap", "dumpheap -stat", "eeheap -gc", "verifyheap"]
    one = analyze(core, cmds, 1)
    two = analyze(core, cmds, 2)
    assert one == two
    assert "No heap corruption detected." in two


def test_plan_splits_by_bytes_and_keeps_large_segments_home() -> None:
    from sosext.clr.heap import parallel
    lengths = [10 << 20] * 20
    large = [False] * 18 + [True, True]
    warm, parent, child = parallel.plan(lengths, large)
    assert sorted(warm + parent + child) == list(range(20))
    assert 18 in parent and 19 in parent and not {18, 19} & set(child)
    share = lambda ids: sum(lengths[i] for i in ids)  # noqa: E731
    assert abs(share(parent) - share(child)) <= 10 << 20
    assert parallel.plan([1 << 20] * 3, [False] * 3) is None
