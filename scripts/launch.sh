#!/bin/sh
# Start the reference kernel (or --bin PATH / --target FILE) and the mock LLM in a
# private network namespace, detached. `launch.sh stop`, `launch.sh status`.
# ARGS after `--` go to the target: `launch.sh -- --fault serial-tools`.
set -eu
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$here/.venv/bin/python"
if [ ! -x "$py" ]; then
    # no .venv: a python3 that has kstress's dependencies, else the fix (make venv), not a traceback
    py="$(command -v python3)"
    rc=0
    "$py" "$here/scripts/_bootstrap.py" launch.sh "$@" || rc=$?
    [ "$rc" = 10 ] && exit 0
    [ "$rc" = 0 ] || exit "$rc"
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
case "${1:-}" in
    stop)   shift; exec "$py" -m harness stop "$@" ;;
    status) shift; exec "$py" -m harness status "$@" ;;
    *)      exec "$py" -m harness launch "$@" ;;
esac
