"""A baseline heap's report data, computed by a child process (its own DAC, the other core)
while this process works on the current heap: ``sosext report OLD --format json -o -``."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from ..clr.runtime import clr_path
from ..clr.snapshots.snapshot import python_for_children
from ..errors import SosError


class BaselineReport:
    def __init__(self, core: str) -> None:
        from ..targets.elfcore import check_core_file
        check_core_file(core)  # in analyze's words
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        argv = [python_for_children(), "-m", "sosext", "report", core, "--format", "json", "-o", "-"]
        chosen = clr_path()  # the child loads its own DAC: the user's choice holds there too
        if chosen:
            argv += ["--clr-path", chosen]
        self.core = core
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=env)

    def result(self) -> dict[str, Any]:
        out, err = self.proc.communicate()
        if self.proc.returncode != 0:
            last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "failed")
            raise SosError(f"baseline {self.core}: {last.removeprefix('error: ')}")
        try:
            return json.loads(out)
        except ValueError:
            raise SosError(f"baseline {self.core}: the child printed no report data")

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
