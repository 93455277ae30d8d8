"""Compile the kernels ahead of time: ``python3 -m sosext.clr.kernels [--out DIR]``.

Writes ``_sosext_kernels.<abi>.so`` and its source hash beside this package (or into DIR,
e.g. the user's cache when the package directory is not writable). Needs numba and a C
compiler once; the result needs neither. Run by the README's set-up.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path


def numba_type(spec: str):  # type: ignore[no-untyped-def]
    from numba import types
    scalars = {"i8": types.int64, "u8": types.uint64, "i4": types.int32, "u4": types.uint32,
               "i1": types.int8, "u1": types.uint8, "b1": types.boolean, "void": types.void}
    if spec.startswith("("):
        return types.Tuple([numba_type(p) for p in spec[1:-1].split(",")])
    if "[]" in spec:
        return types.Array(scalars[spec[:2]], 1, "C", readonly=spec.endswith("r"))
    return scalars[spec]


def _releasing_gil():  # type: ignore[no-untyped-def]
    """numba's compile flags with ``release_gil`` set, which pycc does not offer: kernels
    then run without the GIL, as ``njit(nogil=True)`` does, so that the host's Python (and
    a background build, clr/roots/background.py) goes on while one runs. Kernels touch no Python
    object, which is what makes that safe."""
    from numba.core.compiler import Flags

    class ReleasingGil(Flags):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            self.release_gil = True
    return ReleasingGil


def build(out_dir: Path) -> Path:
    import numba.pycc.compiler as pycc_compiler
    from numba.pycc import CC
    from . import AOT_NAME, KERNELS, bind, source_hash
    bind(force="jit")  # kernels call kernels: their globals must be numba functions while compiling
    pycc_compiler.Flags = _releasing_gil()
    with tempfile.TemporaryDirectory() as tmp:
        cc = CC(AOT_NAME)
        cc.output_dir = tmp
        cc.verbose = False
        for spec in KERNELS.values():
            sig = numba_type(spec.returns)(*[numba_type(a) for a in spec.args])
            cc.export(spec.name, sig)(spec.function)
        cc.compile()
        built = next(Path(tmp).glob(f"{AOT_NAME}*.so"))
        out_dir.mkdir(parents=True, exist_ok=True)
        final = out_dir / built.name
        staged = out_dir / f".{built.name}.{os.getpid()}"
        shutil.copyfile(built, staged)
        os.replace(staged, final)
    (out_dir / f"{AOT_NAME}.hash").write_text(source_hash() + "\n")
    return final


def aot_dirs() -> list[Path]:
    from . import aot_dirs as dirs
    return dirs()


def main() -> int:
    ap = argparse.ArgumentParser(prog="python3 -m sosext.clr.kernels", description=__doc__.splitlines()[0])
    here = Path(__file__).parent
    # Beside the sources in a checkout (or a user-writable install), else the user's cache.
    ap.add_argument("--out", type=Path, default=here if os.access(here, os.W_OK) else aot_dirs()[-1])
    ap.add_argument("--if-stale", action="store_true", help="do nothing if an up-to-date build is there")
    args = ap.parse_args()
    from . import mode
    if args.if_stale and mode() == "aot":
        return 0
    try:
        path = build(args.out)
    except ImportError as e:
        print(f"sosext: cannot compile the kernels: {e} (apt-get install python3-numba)", file=sys.stderr)
        return 1
    print(f"sosext: kernels compiled: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
