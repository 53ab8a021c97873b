#!/bin/sh
# sh and Python at once: see examples/pydantic_ai_agui.py.
"exec" "${KSTRESS_EXAMPLE_PYTHON:-${0%/*}/../.venv/bin/python}" "$0" "$@"
"""The agent of examples/pydantic_ai_agui.py (same tools, same --sequential)
served over A2A by fasta2a's `agent_to_a2a` (fasta2a 2.1.1), on uvicorn: a
framework's own server with no kstress code in it (issue 23).

    OPENAI_BASE_URL=http://127.0.0.1:P/v1 OPENAI_API_KEY=x \\
        examples/pydantic_ai_a2a.py --port PORT [--data-dir DIR] [--sequential]

prints ``agent listening on http://127.0.0.1:PORT``. The socket is bound before
the app is made: fasta2a's card must name the real address (`url=`; its
default is http://localhost:8000, which the client would then call).

fasta2a keeps each context's history in its storage (fasta2a/pydantic_ai/_bridge.py,
`AgentWorker.run_task`: `storage.load_context(context_id)`, then
`update_context(context_id, result.all_messages())`), and its worker runs one
task at a time (fasta2a/worker.py, `Worker._loop` awaits each operation).

KSTRESS_EXAMPLE_PLANT=shared-history plants a bug: a storage that files every
context under one key, so every conversation continues every other.
"""

import sys

from fasta2a.pydantic_ai import agent_to_a2a
from fasta2a.storage import InMemoryStorage

# the script's own folder is sys.path[0]: the agent is the AG-UI example's
from pydantic_ai_agui import bind, make_agent, parse_args, serve


class SharedHistoryStorage(InMemoryStorage):
    """The planted bug: one history, whatever the context id."""

    async def load_context(self, context_id):
        return await super().load_context("shared")

    async def update_context(self, context_id, context):
        await super().update_context("shared", context)


def main() -> None:
    a = parse_args("A2A (fasta2a)")
    sock = bind(a.port)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    storage = SharedHistoryStorage() if a.plant == "shared-history" else None
    app = agent_to_a2a(make_agent(a.data_dir, a.sequential), storage=storage, name="pydantic-ai-fasta2a", url=url)
    print(f"agent listening on {url}", flush=True)
    serve(app, sock)


if __name__ == "__main__":
    sys.exit(main())
