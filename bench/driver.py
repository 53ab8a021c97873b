#!/usr/bin/env python3
"""The driver benchmark (part of `make bench`): kstress's own cost per turn.

Both drivers push the same turns, same connections, through one instant kernel
(bench/instant_kernel.py: answers every input at once, pinned to CPU 1):

  bare     bench/bare_client.py: the least an asyncio client can do per turn
  kstress  `kstress stress --socket ... --mix text:1`: every turn judged,
           recorded in turns.jsonl, counted

pinned to CPU 0, interleaved round by round. Two numbers per driver:
turns/s (the issue's measure; kstress's from its run.json, over its load
phase) and CPU microseconds per turn (from the process's rusage, minus a
run of one input per connection, which removes start-up and imports: steadier
than turns/s on a machine others share). The ratio kstress/bare of turns/s,
paired per round, is the result; the target is >= 0.5. Each round also
records the CPU others used meanwhile (the machine's busy time from
/proc/stat, less the drivers' and the kernel's own): a ratio from a round
where others took a sizeable part of a CPU says little (with both CPUs busy,
the kernel's CPU bounds both drivers and the ratio drifts toward 1).

    bench/driver.py [--rounds 3] [--conns 32] [--inputs 300]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.sandbox.launcher import read_line  # noqa: E402

TARGET_RATIO = 0.5
OTHERS_MAX = 0.1  # CPUs others may use during a round before the bench says its ratio says little
TOKEN = "bench"


class BenchError(Exception):
    pass


@dataclass(frozen=True)
class Settings:
    rounds: int = 3
    conns: int = 32
    inputs: int = 300
    kernel_cpu: str = "1"
    driver_cpu: str = "0"
    fleet: bool = True  # the fleet rows (issue 25), when Ray is installed


# the instant kernel signs its verdict lines as the mock would, and kstress
# checks each tag: a bare socket without --mock needs the key (issue 22)
ENV = dict(os.environ, KSTRESS_VERDICT_KEY="6b7374726573732d62656e63682d6b6579")


def _run(argv: list[str], timeout: float = 300) -> tuple[str, float]:
    """stdout and the CPU seconds (user + sys) the process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[:4])}... exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _busy_s() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat), 0 where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def bare(sock: Path, s: Settings, inputs: int) -> tuple[float, int, float]:
    out, cpu = _run(["taskset", "-c", s.driver_cpu, sys.executable, str(ROOT / "bench" / "bare_client.py"),
                     "--socket", str(sock), "--token", TOKEN, "--conns", str(s.conns), "--inputs", str(inputs)])
    r = json.loads(out)
    if r["turns"] != s.conns * inputs:
        raise BenchError(f"bare client: {r['turns']} turns answered, want {s.conns * inputs}")
    return r["turns_per_s"], r["turns"], cpu


def kstress(sock: Path, s: Settings, inputs: int, out: Path, fleet: str | None = None) -> tuple[float, int, float]:
    """turns/s over the load phase, turns, CPU seconds. With ``fleet`` the
    workers (Ray actors, on the same CPU: taskset is inherited) drive, and the
    CPU is the head's alone: the fleet's processes are not our children."""
    before = set(out.glob("stress-*"))
    _, cpu = _run(["taskset", "-c", s.driver_cpu, sys.executable, "-m", "harness", "stress", "--socket", str(sock), "--token", TOKEN,
                   "--conns", str(s.conns), "--inputs", str(inputs), "--mix", "text:1", "--no-dedup-probe", "--quiet", "--out", str(out),
                   *(["--fleet", fleet] if fleet else [])])
    [run] = set(out.glob("stress-*")) - before
    summary = json.loads((run / "run.json").read_text())["summary"]
    if summary["passed"] != s.conns * inputs:
        raise BenchError(f"kstress: {summary['passed']} of {summary['attempted']} turns passed, want {s.conns * inputs}; see {run}")
    return summary["throughput_per_s"], summary["passed"], cpu


def run(s: Settings) -> dict:
    if (os.cpu_count() or 1) < 2:
        raise BenchError("the driver bench pins the kernel and the driver to two different CPUs")
    with tempfile.TemporaryDirectory(prefix="kst-bench-") as tmp:
        sock, out = Path(tmp) / "k.sock", Path(tmp) / "runs"
        kernel = subprocess.Popen(["taskset", "-c", s.kernel_cpu, sys.executable, str(ROOT / "bench" / "instant_kernel.py"), "--socket", str(sock), "--token", TOKEN],
                                  stdout=subprocess.PIPE, text=True, env=ENV)
        try:
            line = read_line(kernel, 15)
            if not line or "listening" not in line:
                raise BenchError(f"the instant kernel did not start: {line!r}")
            # start-up and imports, measured once per driver and taken off the CPU per turn
            _, n0b, c0b = bare(sock, s, 1)
            _, n0k, c0k = kstress(sock, s, 1, out)
            rounds = []
            for rnd in range(s.rounds):
                t0, busy0, kcpu0 = time.monotonic(), _busy_s(), _proc_cpu_s(kernel.pid)
                b_rate, nb, cb = bare(sock, s, s.inputs)
                k_rate, nk, ck = kstress(sock, s, s.inputs, out)
                others = max(0.0, (_busy_s() - busy0) - cb - ck - (_proc_cpu_s(kernel.pid) - kcpu0)) / (time.monotonic() - t0)
                rounds.append({
                    "bare_turns_per_s": b_rate, "kstress_turns_per_s": k_rate, "ratio": k_rate / b_rate,
                    "bare_cpu_us_per_turn": 1e6 * (cb - c0b) / (nb - n0b), "kstress_cpu_us_per_turn": 1e6 * (ck - c0k) / (nk - n0k),
                    "others_cpus": others,
                })
                print(f"bench: driver round {rnd + 1}/{s.rounds}: bare {b_rate:8.0f} turns/s, kstress {k_rate:8.0f} turns/s, ratio {k_rate / b_rate:.2f}"
                      f" (others used {others:.2f} CPU meanwhile)", flush=True)
                if s.fleet:
                    # issue 25 item 7: one worker of a fleet, and two, on the driver's one CPU, against the same round's bare client
                    for n in (1, 2):
                        f_rate, _, _ = kstress(sock, s, s.inputs, out, fleet=f"local:{n}")
                        rounds[-1][f"fleet{n}_turns_per_s"], rounds[-1][f"fleet{n}_ratio"] = f_rate, f_rate / b_rate
                    print(f"bench: driver round {rnd + 1}/{s.rounds}: fleet local:1 {rounds[-1]['fleet1_turns_per_s']:8.0f} turns/s "
                          f"(ratio {rounds[-1]['fleet1_ratio']:.2f}), local:2 {rounds[-1]['fleet2_turns_per_s']:8.0f} (ratio {rounds[-1]['fleet2_ratio']:.2f})", flush=True)
        finally:
            kernel.terminate()
            try:
                kernel.wait(10)
            except subprocess.TimeoutExpired:
                kernel.kill()
                kernel.wait()
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    return {"settings": asdict(s), "rounds": rounds, "median": med, "target_ratio": TARGET_RATIO}


def table(result: dict) -> str:
    m, s = result["median"], result["settings"]
    return "\n".join([
        "| driver | median turns/s | CPU per turn | ratio to bare (paired) |",
        "|---|---:|---:|---:|",
        f"| bare asyncio client (floor) | {m['bare_turns_per_s']:.0f} | {m['bare_cpu_us_per_turn']:.0f} µs | 1.00 |",
        f"| kstress stress (every turn judged and recorded) | {m['kstress_turns_per_s']:.0f} | {m['kstress_cpu_us_per_turn']:.0f} µs | {m['ratio']:.2f} |",
        *([f"| kstress stress --fleet local:1 (one worker; the head merges) | {m['fleet1_turns_per_s']:.0f} | - | {m['fleet1_ratio']:.2f} |",
           f"| kstress stress --fleet local:2 (two workers on the same CPU) | {m['fleet2_turns_per_s']:.0f} | - | {m['fleet2_ratio']:.2f} |"]
          if "fleet1_ratio" in m else []),
        "",
        f"{s['conns']} connections x {s['inputs']} text inputs through bench/instant_kernel.py (CPU {s['kernel_cpu']}), drivers on CPU "
        f"{s['driver_cpu']}, {s['rounds']} interleaved rounds; target ratio >= {result['target_ratio']}. "
        "CPU per turn: user+sys of the driver process, less a one-input-per-connection run (start-up, imports).",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kstress's cost per turn against a bare asyncio client (an instant kernel).")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=300)
    ap.add_argument("--no-fleet", action="store_true", help="Skip the --fleet local:1 and local:2 rows (they need Ray: kstress[fleet]).")
    a = ap.parse_args(argv)
    fleet = not a.no_fleet and importlib.util.find_spec("ray") is not None
    try:
        result = run(Settings(rounds=a.rounds, conns=a.conns, inputs=a.inputs, fleet=fleet))
    except BenchError as exc:
        print(f"bench: FAILED: {exc}", file=sys.stderr)
        return 1
    print()
    print(table(result))
    busy = [r["others_cpus"] for r in result["rounds"] if r["others_cpus"] > OTHERS_MAX]
    if busy:
        print(f"\nbench: in {len(busy)} of {len(result['rounds'])} rounds other work used more than {OTHERS_MAX} CPU ({', '.join(f'{x:.2f}' for x in busy)}): "
              "its ratios say little; measure again on a quiet machine")
    if result["median"]["ratio"] < TARGET_RATIO:
        print(f"\nbench: the driver ratio {result['median']['ratio']:.2f} is below the target {TARGET_RATIO}")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "driver-latest.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
