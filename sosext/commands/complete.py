"""What a host offers when the user asks to complete a command's words.

Options come from each command's declarations. Values of ``-type`` and ``-mt`` (and the
type name of name2ee) come only from what an earlier command already named: the
completion never loads a DAC, never walks the heap, and never fails.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Command

if TYPE_CHECKING:
    from ..session import Session

TYPE_OPTIONS = ("-type",)
MT_OPTIONS = ("-mt",)


def option_names(cls: type[Command], token: str) -> list[str]:
    """Option names and aliases of ``cls`` that start with ``token`` (any case)."""
    names = [n for o in cls.options for n in (o.name, *o.aliases)]
    return sorted(n for n in names if n.lower().startswith(token.lower()))


def known_types(session: "Session | None") -> dict[int, str]:
    """MethodTable -> name of the types an earlier command named, in every built runtime."""
    found: dict[int, str] = {}
    if session is None:
        return found
    try:
        for rt in session.built_runtimes():
            heap = rt.built_heap()
            if heap is not None:
                found.update(heap.types.names_known())
    except Exception:  # noqa: BLE001 - completing must never fail the prompt
        return {}
    return found


def value_completions(session: "Session | None", cls: type[Command], previous: str, token: str) -> list[str] | None:
    """Values for the option ``previous`` that start with ``token``; None when ``previous``
    takes no completable value."""
    # name2ee <module> <type>: the word after the module is a type name
    wants_type = previous.lower() in TYPE_OPTIONS or (cls.names[0] == "name2ee" and previous != ""
                                                        and not previous.startswith("-"))
    if wants_type:
        names = {n for n in known_types(session).values() if n != "Free"}
        return sorted(n for n in names if n.startswith(token))
    if previous.lower() in MT_OPTIONS:
        t = token.lower().removeprefix("0x")
        return sorted(f"{mt:x}" for mt in known_types(session) if f"{mt:x}".startswith(t))
    return None
