"""sosext's own PEP 517 build backend: a pure-Python wheel, built from the standard library.

pip builds in an isolated environment and wants to download the backend a project names
(setuptools) from PyPI; Debian's setuptools is not visible there, so an offline
``pip install .`` fails. sosext is pure Python with one package, so this backend packs it
itself: ``[build-system] requires = []``, ``backend-path = ["backend"]``. It reads the
project table of pyproject.toml (name, version, dependencies, scripts) and writes the
wheel's ``.dist-info`` (METADATA, WHEEL, entry_points.txt, RECORD) by the wheel spec.

Also: ``build_sdist`` (the sources as a tar.gz) and ``build_editable`` (PEP 660: a .pth
file naming the source tree, for ``pip install -e .``).
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent
PACKAGE = "sosext"
TAG = "py3-none-any"
# What an sdist carries besides the package: enough to build the wheel again and run the demo.
SDIST_EXTRA = ("pyproject.toml", "README.md", "backend", "lldbinit", "gdbinit", "docs", "examples", "scripts")
_SKIP_DIRS = {"__pycache__", "bin", "obj"}


def _project() -> dict:
    with open(SOURCE / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _dist_name(project: dict) -> str:
    return f"{project['name'].replace('-', '_')}-{project['version']}"


def _metadata(project: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lic = project.get("license", {})
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {d}; extra == "{extra}"' for d in deps]
    body = ""
    readme = project.get("readme")
    if isinstance(readme, str) and (SOURCE / readme).is_file():
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (SOURCE / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n" + body


def _entry_points(project: dict) -> str:
    scripts = project.get("scripts", {})
    if not scripts:
        return ""
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: sosext_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files() -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(SOURCE / PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            # The kernels compiled ahead of time are this machine's build (python3 -m
            # sosext.clr.kernels makes them where sosext is installed): not part of a py3 wheel.
            if not name.endswith((".pyc", ".pyo")) and not name.startswith("_sosext_kernels"):
                out.append(Path(dirpath) / name)
    return out


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, files: dict[str, bytes]) -> str:
    project = _project()
    dist = _dist_name(project)
    info = f"{dist}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = _metadata(project).encode()
    files[f"{info}/WHEEL"] = _wheel_file().encode()
    entry = _entry_points(project)
    if entry:
        files[f"{info}/entry_points.txt"] = entry.encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{dist}-{TAG}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files.items():
            z.writestr(zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0)), data,
                       compress_type=zipfile.ZIP_DEFLATED)
    return name


# -- the PEP 517 / PEP 660 hooks ---------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None) -> list[str]:  # type: ignore[no-untyped-def]
    return []


def get_requires_for_build_sdist(config_settings=None) -> list[str]:  # type: ignore[no-untyped-def]
    return []


def get_requires_for_build_editable(config_settings=None) -> list[str]:  # type: ignore[no-untyped-def]
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings=None) -> str:  # type: ignore[no-untyped-def]
    project = _project()
    info = Path(metadata_directory) / f"{_dist_name(project)}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(_metadata(project), encoding="utf-8")
    (info / "WHEEL").write_text(_wheel_file())
    entry = _entry_points(project)
    if entry:
        (info / "entry_points.txt").write_text(entry)
    return info.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:  # type: ignore[no-untyped-def]
    files = {p.relative_to(SOURCE).as_posix(): p.read_bytes() for p in _package_files()}
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:  # type: ignore[no-untyped-def]
    return _write_wheel(wheel_directory, {f"_{PACKAGE}_editable.pth": f"{SOURCE}\n".encode()})


def build_sdist(sdist_directory: str, config_settings=None) -> str:  # type: ignore[no-untyped-def]
    project = _project()
    base = f"{project['name']}-{project['version']}"
    name = f"{base}.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if any(p in _SKIP_DIRS for p in parts) or info.name.endswith((".pyc", ".pyo")):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(Path(sdist_directory) / name, "w:gz") as tar:
        for entry in (PACKAGE, *SDIST_EXTRA):
            path = SOURCE / entry
            if path.exists():
                tar.add(path, arcname=f"{base}/{entry}", filter=keep)
        pkg_info = ("Metadata-Version: 2.1\n" + _metadata(project).split("\n", 1)[1]).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return name
