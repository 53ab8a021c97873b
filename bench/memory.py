#!/usr/bin/env python3
"""The memory benchmark (part of `make bench`; issue 25, item 6): the peak RSS
of a kstress process is flat in the number of turns.

`kstress stress --socket ... --conns 32 --mix text:1` through the instant
kernel (bench/instant_kernel.py) at two sizes, 50,000 and 1,000,000 turns;
each run's peak RSS is the ru_maxrss of a fresh wrapper process's only
child (kstress itself: with --socket it starts nothing). The target is the
big run within 1.3x of the small one: stress keeps no row in memory (its
summary, thresholds, live metrics and charts come from streaming aggregates,
harness/scenarios/digest.py), so what grows with the turns is only bounded
by design (20,000 samples a series, a 20,000-row chart sample).

    bench/memory.py [--small 50000] [--large 1000000] [--conns 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from driver import ENV, ROOT, TOKEN, BenchError  # noqa: E402

TARGET = 1.3
# a fresh process per run: RUSAGE_CHILDREN's ru_maxrss is then kstress's own peak
WRAP = "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"


def peak(sock: Path, out: Path, conns: int, turns: int) -> dict:
    inputs = -(-turns // conns)
    before = set(out.glob("stress-*"))
    argv = [sys.executable, "-c", WRAP, sys.executable, "-m", "harness", "stress", "--socket", str(sock), "--token", TOKEN,
            "--conns", str(conns), "--inputs", str(inputs), "--mix", "text:1", "--no-dedup-probe", "--quiet", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=1800)
    if done.returncode != 0:
        raise BenchError(f"kstress stress ({conns * inputs} turns) exited {done.returncode}: {done.stderr[-2000:]}")
    [run] = set(out.glob("stress-*")) - before
    s = json.loads((run / "run.json").read_text())["summary"]
    if s["passed"] != conns * inputs:
        raise BenchError(f"{s['passed']} of {s['attempted']} turns passed, want {conns * inputs}; see {run}")
    size = (run / "turns.jsonl").stat().st_size
    # the big run's rows are not needed again: only their size is reported
    (run / "turns.jsonl").unlink()
    return {"turns": conns * inputs, "peak_rss_mb": round(int(done.stdout.split()[-1]) / 1024, 1), "turns_per_s": s["throughput_per_s"],
            "turns_jsonl_mb": round(size / 2**20, 1), "p50_exact": "rel_error" not in (s.get("latency_s") or {})}


def run(small: int, large: int, conns: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="kst-mem-") as tmp:
        sock, out = Path(tmp) / "k.sock", Path(tmp) / "runs"
        kernel = subprocess.Popen([sys.executable, str(ROOT / "bench" / "instant_kernel.py"), "--socket", str(sock), "--token", TOKEN],
                                  stdout=subprocess.PIPE, text=True, env=ENV)
        try:
            from harness.sandbox.launcher import read_line

            line = read_line(kernel, 15)
            if not line or "listening" not in line:
                raise BenchError(f"the instant kernel did not start: {line!r}")
            rows = [peak(sock, out, conns, n) for n in (small, large)]
        finally:
            kernel.terminate()
            try:
                kernel.wait(10)
            except subprocess.TimeoutExpired:
                kernel.kill()
                kernel.wait()
    ratio = rows[1]["peak_rss_mb"] / rows[0]["peak_rss_mb"]
    return {"rows": rows, "ratio": round(ratio, 3), "target": TARGET, "ok": ratio <= TARGET}


def table(r: dict) -> str:
    out = ["| turns | peak RSS | turns/s | turns.jsonl | latency percentiles |", "|---:|---:|---:|---:|---|"]
    for x in r["rows"]:
        out.append(f"| {x['turns']:,} | {x['peak_rss_mb']:.1f} MB | {x['turns_per_s']:.0f} | {x['turns_jsonl_mb']:.1f} MB | "
                   f"{'exact' if x['p50_exact'] else 'histogram, 1%'} |")
    out.append(f"\npeak RSS {r['rows'][1]['turns']:,} / {r['rows'][0]['turns']:,} turns: {r['ratio']:.2f}x (target <= {r['target']}x)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kstress's peak RSS at two run sizes (memory flat in turns).")
    ap.add_argument("--small", type=int, default=50_000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--conns", type=int, default=32)
    a = ap.parse_args(argv)
    try:
        r = run(a.small, a.large, a.conns)
    except BenchError as exc:
        print(f"bench: FAILED: {exc}", file=sys.stderr)
        return 1
    print(table(r))
    if not r["ok"]:
        print(f"\nbench: peak RSS grew {r['ratio']:.2f}x from {r['rows'][0]['turns']:,} to {r['rows'][1]['turns']:,} turns: above {TARGET}x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
