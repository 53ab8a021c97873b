#!/bin/sh
# A sh script and a Python program at once, like examples/pydantic_ai_kernel.py:
# kstress records the sha256 of the target's `bin`, so the bin is this app, and
# sh starts it on the project's venv python (or $KSTRESS_EXAMPLE_PYTHON), where
# langgraph is installed. Python reads the next line as string literals.
"exec" "${KSTRESS_EXAMPLE_PYTHON:-${0%/*}/../.venv/bin/python}" "$0" "$@"
"""A LangGraph agent served over AG-UI by ag-ui-langgraph, with no kstress code
in it (issue 23 item 6; docs/example-langgraph-agui.md).

    PORT=8000 OPENAI_BASE_URL=http://127.0.0.1:8101/v1 examples/langgraph_agui.py

serves AG-UI at http://127.0.0.1:$PORT/agui. The agent is langchain's
`create_agent` (a model node and langgraph's prebuilt ToolNode), its model
`ChatOpenAI` pointed at $OPENAI_BASE_URL; its tools carry the mock catalog's
default names and argument shapes (docs/catalog.md). Checkpoints live in an
in-memory `InMemorySaver`, keyed by AG-UI's threadId: the server keeps each
thread's history itself.

Environment (all optional but OPENAI_BASE_URL):
- `PORT`: the port on 127.0.0.1 (default 8000).
- `AGENT_DATA_DIR`: where knowledge_create writes (default: a fresh temp dir).
- `LANGGRAPH_MAX_CONCURRENCY=1`: langgraph's own `max_concurrency` run config,
  which gates every task of a superstep, so the tool calls of a batch run one
  at a time (examples/langgraph-agui-sequential.toml).
- `KSTRESS_EXAMPLE_PLANT=shared-history`: a planted bug, off by default: every
  thread is run on one checkpoint thread, so sessions share one history.
"""

import asyncio
import os
import re
import sys
import tempfile
from pathlib import Path

import uvicorn
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
DATA_DIR = Path(os.environ.get("AGENT_DATA_DIR") or tempfile.mkdtemp(prefix="langgraph-agui-"))
OUTPUT_CAP = 64 * 1024


# The tools are async: ToolNode's async path (`_afunc`) gathers the calls of a
# batch on the event loop; a sync tool would be run in a thread instead.
async def lookup(key: str, query: str = "") -> str:
    """Look up an entry by key. Read-only and fast."""
    return f"lookup {key}: entry (query {query!r})"


async def cmd_run(command: str) -> str:
    """Run a shell command; returns its output."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, cwd=DATA_DIR, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        # its own process group, so a cancelled run can kill what it forked
        start_new_session=True,
    )
    try:
        out, _ = await proc.communicate()
    except asyncio.CancelledError:
        proc.kill()
        raise
    text = out[:OUTPUT_CAP].decode(errors="replace")
    if proc.returncode:
        return f"ERROR: exit {proc.returncode}: {text}"
    # a result that starts with "error" would read as a tool error (docs/protocol.md)
    return f"output: {text}" if text.lstrip().lower().startswith("error") else (text or "(no output)")


async def knowledge_create(title: str, content: str) -> str:
    """Create a knowledge entry (a file) and add it to the index."""
    if not NAME_RE.fullmatch(title):
        return f"ERROR: title {title!r} is not usable as a file name"
    folder = DATA_DIR / "knowledge"
    folder.mkdir(exist_ok=True)
    (folder / f"{title}.md").write_text(content)
    # a read-modify-write: why this tool is not parallel-safe
    index = folder / "INDEX"
    index.write_text((index.read_text() if index.exists() else "") + title + "\n")
    return f"created {title}"


async def img_describe(path: str) -> str:
    """Describe an image."""
    return f"ERROR: img_describe {path}: this agent has no image model"


async def ocr(path: str) -> str:
    """Read the text in an image."""
    return f"ERROR: ocr {path}: this agent has no image model"


class SharedHistory(LangGraphAgent):
    """The planted bug: every AG-UI thread runs on one checkpoint thread."""

    async def run(self, input):
        async for event in super().run(input.model_copy(update={"thread_id": "shared"})):
            yield event


def make_app() -> FastAPI:
    llm_url = os.environ.get("OPENAI_BASE_URL")
    if not llm_url:
        # without it the SDK would fall back to OpenAI's own URL
        sys.exit("langgraph_agui: set OPENAI_BASE_URL (the model's base URL, e.g. http://127.0.0.1:8101/v1)")
    # max_retries=0: a retried 5xx would hide the mock's fault and double its requests
    model = ChatOpenAI(model="kstress-mock", base_url=llm_url, api_key=os.environ.get("OPENAI_API_KEY", "kstress"),
                       max_retries=0, timeout=60)
    graph = create_agent(model, [lookup, cmd_run, knowledge_create, img_describe, ocr],
                         system_prompt="Call the tools you are asked for, then answer with the text you are given.",
                         checkpointer=InMemorySaver())
    config = {}
    if os.environ.get("LANGGRAPH_MAX_CONCURRENCY"):
        config["max_concurrency"] = int(os.environ["LANGGRAPH_MAX_CONCURRENCY"])
    plant = os.environ.get("KSTRESS_EXAMPLE_PLANT", "")
    if plant not in ("", "shared-history"):
        sys.exit(f"langgraph_agui: KSTRESS_EXAMPLE_PLANT={plant!r} is not a plant; the one there is: shared-history")
    cls = SharedHistory if plant == "shared-history" else LangGraphAgent
    # emit_raw_events=False: by default every AG-UI event carries a copy of the
    # LangGraph event it came from (and a RAW event repeats it), which multiplies
    # the stream's size; a client that reads the AG-UI events needs neither
    agent = cls(name="kstress_langgraph", graph=graph, config=config, emit_raw_events=False)
    app = FastAPI()
    add_langgraph_fastapi_endpoint(app, agent, "/agui")
    return app


def main() -> None:
    port = int(os.environ.get("PORT", "8000"))
    uvicorn.run(make_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
