"""The SOS name list (commands/sos_names.py): every name reaches a command, a placeholder says
so in one line, and a real registration replaces a placeholder with no change to the list."""
from __future__ import annotations

import pytest

from sosext.commands import load_all
from sosext.commands import base
from sosext.commands.base import REGISTRY, Command, lookup, register
from sosext.commands.sos_names import NEAREST, SOS_NAMES, all_names, main_name
from sosext.errors import UsageError

load_all()


def test_every_sos_name_reaches_a_command() -> None:
    for name in all_names():
        cls = lookup(name)
        assert cls is not None, name
        assert cls is lookup(name.upper()) or name.upper() not in REGISTRY  # any case
        # an alias reaches the same command as its main name
        assert cls is lookup(main_name(name)), name


def test_aliases_are_unique() -> None:
    seen: dict[str, str] = {}
    for main, aliases in SOS_NAMES.items():
        for n in (main, *aliases):
            assert n not in seen, f"{n} under {main} and {seen[n]}"
            seen[n] = main


def test_a_placeholder_says_what_to_use_in_one_line() -> None:
    for main, near in NEAREST.items():
        cls = lookup(main)
        if main in REGISTRY:
            continue  # sosext has it now
        with pytest.raises(UsageError) as e:
            cls().run(None, cls.parse(["-anything", "0x10"]))
        text = str(e.value)
        assert "\n" not in text and text.startswith(f"{main} is an SOS command sosext does not have yet")
        if near.split()[0] in REGISTRY:
            assert f"; try: {near} " in text


def test_a_real_registration_replaces_the_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    # An SOS name with an alias that sosext has no command for (by now every real one has one).
    name = "fakesoscommand"
    monkeypatch.setitem(SOS_NAMES, name, ("fsc",))
    assert lookup(name).__name__.startswith("Placeholder_")
    monkeypatch.setattr(base, "REGISTRY", dict(REGISTRY))

    class Real(Command):
        names = (name,)
        summary = "a real one"

    register(Real)
    assert lookup(name) is Real
    for alias in SOS_NAMES[name]:
        assert lookup(alias) is Real  # its SOS aliases follow
