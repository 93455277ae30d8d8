"""The target's runtime module, found without the DAC."""
from __future__ import annotations

from ..readers.location import RuntimeLocation, find_runtime
from ..targets.base import Target


def runtime_location(target: Target) -> RuntimeLocation:
    """Where libcoreclr.so is in ``target`` (raises NotDotNetError); no DAC is looked for."""
    return RuntimeLocation(dac_path="", runtime=find_runtime(target), version="", trusted_by="")
