#!/usr/bin/env bash
# The test suite: unit tests, then real .NET debuggees under LLDB, GDB and the CLI, live and on cores.
#   ./run-tests.sh               everything
#   ./run-tests.sh -m "not slow" only the fast unit tests
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh --test
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests "$@"
