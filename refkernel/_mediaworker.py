"""The image/OCR worker the kernel asks over a pipe: one JSON request per line
on stdin, one JSON answer per line on stdout. No model ships with kstress, so
every request is answered "no model loaded" -- which is exactly what the
kernel's IPC wiring and tool-error handling are tested with.

Run by path with ``python -I`` (stdlib only), not as part of the package.
"""

import json
import sys


def main() -> int:
    for line in sys.stdin:
        try:
            req = json.loads(line)
            rid = req["id"]
        except (ValueError, KeyError, TypeError):
            continue
        answer = {"id": rid, "ok": False, "error": "no model loaded", "op": req.get("op")}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
