#!/usr/bin/env python3
"""A pydantic-ai agent served over A2A by fasta2a (fasta2a 2.1.1's
``agent_to_a2a``, pydantic-ai-slim 2.68.0), on uvicorn: a real framework's
A2A server with no kstress code in it (issue 23). Its model is the kstress
mock (``--llm-url``); its tools are pydai_agui.py's (the mock catalog's
default names). The socket is bound before the app is made because fasta2a's
card must name its real address (``url=``; its default is localhost:8000).

    python pydai_a2a.py --llm-url http://127.0.0.1:P/v1 --port 0

prints ``agent listening on http://127.0.0.1:PORT``.
"""

import argparse
import socket
import sys
from pathlib import Path

import uvicorn
from fasta2a.pydantic_ai import agent_to_a2a

sys.path.insert(0, str(Path(__file__).parent))
from pydai_agui import make_agent  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-url", required=True)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = agent_to_a2a(make_agent(a.llm_url), name="kst-fasta2a", url=url)
    print(f"agent listening on {url}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
