"""Files sosext writes for the user (reports, snapshots, logs, the stress log, heap dumps).

Each is a new file, private to the user (0600), and never written through a symbolic link:
O_CREAT|O_EXCL|O_NOFOLLOW, so a link or a file planted at the path is refused, not followed or
truncated. An existing file is replaced only when the caller was asked to (``--force``), and
then the name itself is unlinked first (a link, never what it points to). Below every layer:
commands, the model (gcdump snapshots) and the CLI use it alike.
"""
from __future__ import annotations

import os
from typing import IO

from .errors import SosError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_private(path: str, *, force: bool = False, binary: bool = False,
                   exists: str | None = None, error: type[SosError] = SosError) -> IO:
    """``path`` created new (0600) and open for writing (text: UTF-8, or ``binary``).

    An existing name is an error (``exists`` is its message; by default it points to --force)
    unless ``force``, which replaces a file but never a directory. ``error`` is the SosError
    subclass raised, so a caller keeps its own family of errors."""
    if os.path.lexists(path):
        if not force:
            raise error(exists or f"{path} exists; choose another name or add --force")
        if os.path.isdir(path) and not os.path.islink(path):
            raise error(f"{path} is a directory")
        try:
            os.unlink(path)
        except OSError as e:
            raise error(f"cannot replace {path}: {e.strerror}") from None
    try:
        fd = os.open(path, _FLAGS, 0o600)
    except FileExistsError:  # created in between
        raise error(exists or f"{path} exists; choose another name or add --force") from None
    except OSError as e:
        raise error(f"cannot create {path}: {e.strerror or e}") from None
    if binary:
        return os.fdopen(fd, "wb")
    return os.fdopen(fd, "w", encoding="utf-8", errors="replace")


def write_new(path: str, text: str, force: bool = False) -> None:
    """``text`` as the whole of a new private file (see :func:`create_private`)."""
    with create_private(path, force=force) as f:
        f.write(text)
