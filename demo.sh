#!/usr/bin/env bash
# The main job, end to end: build the bundled leaking service, let it leak, dump it through its
# diagnostics socket (sosext collect), and show `dumpheap -stat` of that dump inside LLDB.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec /usr/bin/python3 scripts/demo.py "$@"
