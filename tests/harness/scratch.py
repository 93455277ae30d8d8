"""A scratch directory sosext's DAC trust rules accept (tests that copy or build runtimes).

The checkout's ``.work/`` is used when its whole path is owned by root or the user and
writable by nobody else; a checkout under ``/tmp`` (world-writable) is not, so then the
directory goes under the home (``~/.cache/sosext-tests``). None if neither qualifies.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def trusted_scratch(name: str) -> tuple[Path | None, str]:
    """(a fresh directory ``name`` in a trusted place, or None; why the last candidate failed)."""
    from sosext.dac.trust import untrusted_reason
    why = "no candidate"
    for base in (REPO / ".work", Path.home() / ".cache" / "sosext-tests"):
        base.mkdir(parents=True, exist_ok=True)
        root = base / name
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(mode=0o755)
        os.chmod(root, 0o755)
        probe = root / "probe"
        probe.write_text("")
        reason = untrusted_reason(str(probe))
        probe.unlink()
        if reason is None:
            return root, ""
        why = reason
        shutil.rmtree(root)
    return None, why
