"""targets/prewarm.py: the CLI's early mapping of a core is used only for that same file."""
from __future__ import annotations

import os
import time

from sosext.targets import prewarm


def test_the_mapping_is_taken_for_the_same_file_only(tmp_path) -> None:
    core = tmp_path / "a.core"
    core.write_bytes(b"\x7fELF" + bytes(1 << 20))
    prewarm.prewarm(str(core))
    made = prewarm.take(str(core), os.stat(core))
    assert made is not None
    mm, fd = made
    assert mm[:4] == b"\x7fELF" and os.fstat(fd).st_ino == os.stat(core).st_ino
    assert prewarm.take(str(core), os.stat(core)) is None  # taken once
    mm.close()
    os.close(fd)

    prewarm.prewarm(str(core))
    time.sleep(0.01)
    os.utime(core, ns=(1, 1))  # the file changed since: not the same file
    assert prewarm.take(str(core), os.stat(core)) is None


def test_what_is_no_regular_file_is_left_alone(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for path in (str(tmp_path), str(empty), str(tmp_path / "missing")):
        prewarm.prewarm(path)
        assert prewarm.take(path, os.stat(tmp_path)) is None
