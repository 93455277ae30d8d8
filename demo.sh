#!/usr/bin/env bash
# docs/leak-hunting.md's steps 1-5, end to end, on the bundled leaking service: build it, let it
# leak, take two heap dumps through its diagnostics socket (sosext collect), show which types grew
# (sosext diff) and what holds them (sosext leaks), and the second dump in LLDB. ./demo.sh --help
# says so without running anything.
set -euo pipefail
cd "$(dirname "$0")"
if (($#)); then
    exec /usr/bin/python3 scripts/demo.py "$@"   # --help (or a wrong argument): usage, nothing run
fi
scripts/setup.sh
exec /usr/bin/python3 scripts/demo.py
