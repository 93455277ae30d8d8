"""The PE version resource and image size readers (clrmodules -v): exact on the installed
runtime's files, and never more than None on damaged input."""
from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sosext.formats.metadata.pe import file_version, file_version_of, image_size
from sosext.dac.loader import file_version as native_file_version

RUNTIMES = sorted(glob.glob("/usr/share/dotnet/shared/Microsoft.NETCore.App/*/"))


@pytest.mark.skipif(not RUNTIMES, reason="no .NET runtime installed")
def test_corelib_version_is_the_runtime_build() -> None:
    # CoreLib and libcoreclr come from one build: the managed file's version resource and
    # the native binary's @(#)Version marker name the same version.
    d = RUNTIMES[-1]
    assert file_version_of(os.path.join(d, "System.Private.CoreLib.dll")) == \
        native_file_version(os.path.join(d, "libcoreclr.so"))


@pytest.mark.skipif(not RUNTIMES, reason="no .NET runtime installed")
def test_image_size_from_the_headers() -> None:
    path = os.path.join(RUNTIMES[-1], "System.Runtime.dll")
    data = open(path, "rb").read()
    pe = int.from_bytes(data[0x3C:0x40], "little")
    want = int.from_bytes(data[pe + 24 + 56:pe + 24 + 60], "little")
    assert image_size(lambda a, n: data[a:a + n], 0) == want


def test_not_a_pe_file() -> None:
    assert file_version(b"") is None and file_version(b"MZ" + bytes(200)) is None
    assert file_version_of("/dev/null") is None and file_version_of("/nonexistent/x.dll") is None
    assert image_size(lambda a, n: b"", 0) is None


@pytest.mark.skipif(not RUNTIMES, reason="no .NET runtime installed")
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_images_give_none_or_a_version(data) -> None:  # type: ignore[no-untyped-def]
    path = os.path.join(RUNTIMES[-1], "System.Runtime.dll")
    image = bytearray(open(path, "rb").read())
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.one_of(st.integers(0, 4095), st.integers(0, len(image) - 1)))
        image[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(image)))
    got = file_version(bytes(image[:cut]))
    assert got is None or isinstance(got, str)
