"""The analyzer's interactive prompt: history, completion of command names, help."""
from __future__ import annotations

import os
from typing import Callable

from .commands import load_all
from .commands.base import REGISTRY, lookup
from .commands.complete import option_names, value_completions
from .render.text import safe_line

HISTORY = os.path.expanduser("~/.sosext_history")


def _setup_readline(session=None) -> None:  # type: ignore[no-untyped-def]
    try:
        import readline
    except ImportError:  # pragma: no cover - readline ships with Debian's python
        return
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass
    names = sorted(set(REGISTRY) | {"help", "quit", "exit"})

    def complete(text: str, state: int):  # type: ignore[no-untyped-def]
        buf = readline.get_line_buffer()
        if " " in buf.lstrip():
            words = buf.split()
            cmd = lookup(words[0])
            previous = words[-2] if text else words[-1]
            values = value_completions(session, cmd, "" if previous == words[0] else previous, text) \
                if cmd else None
            matches = values if values is not None else option_names(cmd, text) if cmd else []
        else:
            matches = [n for n in names if n.startswith(text)]
        return matches[state] if state < len(matches) else None
    readline.set_completer(complete)
    readline.set_completer_delims(" \t")
    readline.parse_and_bind("tab: complete")


def _save_history() -> None:
    try:
        import readline
        readline.set_history_length(2000)
        readline.write_history_file(HISTORY)
    except (ImportError, OSError):
        pass


def repl(session, run: Callable[[str], bool]) -> int:  # type: ignore[no-untyped-def]
    load_all()
    _setup_readline(session)
    # The core's path is the user's, but a path can hold anything: escaped like all target text.
    print(safe_line(f"sosext analyzer: {session.target().describe()}. Type 'soshelp' for commands, 'quit' to leave."))
    try:
        while True:
            try:
                line = input("> ")
            except KeyboardInterrupt:
                print()
                continue
            except EOFError:
                print()
                break
            stripped = line.strip()
            if stripped in ("quit", "exit", "q"):
                break
            if stripped == "help" or stripped.startswith("help "):
                stripped = "soshelp" + stripped[4:]
            try:
                run(stripped)
            except KeyboardInterrupt:
                print("error: interrupted")
    finally:
        _save_history()
    return 0
