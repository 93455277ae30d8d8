#!/usr/bin/env bash
# Installs what sosext needs from Debian's packages, only what is missing.
#   scripts/setup.sh          runtime needs: lldb-16 with its Python module, gdb, numpy, numba (and gcc, which
#                             compiles its kernels ahead of time), tabulate, pygments, pyelftools, plotly (sosext report)
#   scripts/setup.sh --test   plus pytest and hypothesis, pip and venv (tests/test_packaging.py), and chromium
#                             (tests/test_report.py opens the HTML report in headless Chromium)
#                             and tmux (tests/test_tutorial.py plays docs/leak-hunting.md in a terminal),
#                             plus everything --arm64 installs,
#                             and the real SOS, dotnet-dump (pinned, a .NET tool from NuGet) under the tests' work
#                             directory (tests/test_sos_parity.py compares sosext with it)
#   scripts/setup.sh --arm64  only what makes and opens linux-arm64 cores on an x86-64 machine (tests/test_arm64.py,
#                             docs/readers.md): qemu-user-static, gdb-multiarch, and the arm64 C runtime through
#                             Debian's multiarch (dpkg --add-architecture arm64; libc6 libstdc++6 libgcc-s1 zlib1g)
# Then it makes this checkout the sosext of /usr/bin/python3 (scripts/link_checkout.py): the `sosext`
# command (/usr/local/bin as root, else ~/.local/bin) and `import sosext` from any directory.
# The .NET SDK (dotnet) is not a Debian package: it must already be installed.
set -euo pipefail

pkgs=(lldb-16 python3-lldb-16 gdb python3-numpy python3-numba gcc python3-dev python3-tabulate python3-pygments python3-pyelftools python3-plotly)
arm64_pkgs=(qemu-user-static gdb-multiarch libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 zlib1g:arm64)
arm64_only=0
case "${1:-}" in
    --test) pkgs+=(python3-pytest python3-hypothesis python3-pip python3-venv chromium tmux "${arm64_pkgs[@]}") ;;
    --arm64) pkgs=("${arm64_pkgs[@]}"); arm64_only=1 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
    echo "sosext setup: installing ${missing[*]}" >&2
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    # The arm64 libraries come from Debian's multiarch: dpkg must know the architecture first.
    if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
        $SUDO dpkg --add-architecture arm64
    fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
((arm64_only)) && exit 0

if ! command -v dotnet >/dev/null 2>&1; then
    echo "sosext setup: the .NET SDK (dotnet) is required to build the bundled apps and test debuggees" >&2
    exit 1
fi

# What an installed package would have: bytecode (this machine sets PYTHONDONTWRITEBYTECODE, so
# without it every start recompiles sosext), and the heap kernels compiled ahead of time (numba;
# a no-op when the build beside the sources is current).
cd "$(dirname "$0")/.."
/usr/bin/python3 -m compileall -q sosext lldbinit gdbinit >/dev/null
/usr/bin/python3 -m sosext.clr.kernels --if-stale >&2 || echo "sosext setup: kernels not compiled; the JIT or numpy path will be used" >&2
# The real SOS as the tests' second opinion: dotnet-dump, pinned, in the tests' work directory
# ($SOSEXT_WORK_DIR, else .work/, as tests/harness finds it). Installed once; one line if it cannot be.
if [[ "${1:-}" == "--test" ]]; then
    dd_version=10.0.750501
    dd_dir="${SOSEXT_WORK_DIR:-$PWD/.work}/tools/dotnet-dump-$dd_version"
    if [[ ! -x "$dd_dir/dotnet-dump" ]]; then
        DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 dotnet tool install dotnet-dump --tool-path "$dd_dir" \
            --version "$dd_version" >/dev/null 2>&1 \
            || echo "sosext setup: dotnet-dump $dd_version not installed (NuGet unreachable?): tests/test_sos_parity.py will skip" >&2
    fi
fi

# The `sosext` command and `import sosext` from anywhere, both this checkout (see docs/install.md).
/usr/bin/python3 scripts/link_checkout.py || echo "sosext setup: the sosext command was not installed; run sosext as '/usr/bin/python3 -m sosext' from this directory" >&2
