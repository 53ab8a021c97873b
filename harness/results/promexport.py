"""Prometheus / OpenMetrics text of a run, through the official client's
exposition (prometheus_client): `kstress report DIR --format prom` writes it
(node_exporter textfile style), `--metrics-port P` serves the same families
live while a run goes. Metric names and labels are in docs/results.md.

Everything is computed from the turn rows (and the summary, when the run has
ended), so the live and the stored view agree.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .stats import percentile

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
QUANTILES = (0.5, 0.9, 0.95, 0.99)
LOAD_KINDS = ("load", "interrupt", "session", "batch", "abtest", "cmp")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def target_name(doc: dict[str, Any]) -> str:
    ts = (doc.get("meta") or {}).get("targets") or []
    names = [t.get("label") or t.get("name") or t.get("socket") or "?" for t in ts]
    return ",".join(str(n) for n in names) or "?"


def families(scenario: str, target: str, rows: Sequence[dict[str, Any]], doc: dict[str, Any] | None = None) -> Iterable[Any]:
    """Every metric family of a run: the rows so far, plus the final summary when ``doc`` is given."""
    # hold's load is its probe inputs; stress's probe is the replay-guard check, not load
    kinds = LOAD_KINDS + (("probe",) if scenario == "hold" else ())
    turns = [r for r in rows if r.get("kind") in kinds and not r.get("warmup")]
    kernel = any("kernel" in r for r in turns)  # several kernels at once: one series each
    by = ["marker"] + (["kernel"] if kernel else [])

    def key(r: dict[str, Any]) -> tuple[str, ...]:
        return (r.get("marker") or "text",) + ((str(r.get("kernel") or ""),) if kernel else ())

    yield from _turn_families(scenario, target, turns, by, key)
    yield from _latency_families(scenario, target, turns, by, key)
    if doc is None:
        return
    s = doc.get("summary") or {}
    yield from _run_families(scenario, target, doc, s)
    yield from _resource_families(scenario, target, s.get("resources") or {})
    yield from _scenario_families(scenario, target, s)


_Key = Callable[[dict[str, Any]], tuple[str, ...]]


def _turn_families(scenario: str, target: str, turns: list[dict[str, Any]], by: list[str], key: _Key) -> Iterable[Any]:
    """The turns judged, by marker and result, and the failed ones by failure name."""
    labels = ["scenario", "target"]
    counts = CounterMetricFamily("kstress_turns", "Turns judged, by marker and result (warm-up turns excluded).", labels=labels + by + ["result"])
    tally: dict[tuple[str, ...], int] = {}
    for r in turns:
        k = key(r) + ("passed" if r.get("passed") else "failed",)
        tally[k] = tally.get(k, 0) + 1
    for k, v in sorted(tally.items()):
        counts.add_metric([scenario, target, *k], v)
    yield counts

    fails = CounterMetricFamily("kstress_failures", "Failed turns by failure name (the first word of the first failure).", labels=labels + ["failure"])
    names: dict[str, int] = {}
    for r in turns:
        if not r.get("passed") and r.get("failures"):
            n = str(r["failures"][0]).split(" ", 1)[0]
            names[n] = names.get(n, 0) + 1
    for n, v in sorted(names.items()):
        fails.add_metric([scenario, target, n], v)
    yield fails


def _latency_families(scenario: str, target: str, turns: list[dict[str, Any]], by: list[str], key: _Key) -> Iterable[Any]:
    """Passed turns' latency: a histogram and nearest-rank quantiles per series."""
    labels = ["scenario", "target"]
    lat: dict[tuple[str, ...], list[float]] = {}
    for r in turns:
        if r.get("passed") and _num(r.get("latency_s")):
            lat.setdefault(key(r), []).append(r["latency_s"])
    hist = HistogramMetricFamily("kstress_turn_latency_seconds", "Latency of passed turns, send to terminal frame.", labels=labels + by)
    quant = GaugeMetricFamily("kstress_turn_latency_quantile_seconds", "Nearest-rank quantiles of passed turns' latency.", labels=labels + by + ["quantile"])
    for k, xs in sorted(lat.items()):
        xs.sort()
        buckets, i = [], 0
        for b in BUCKETS:
            while i < len(xs) and xs[i] <= b:
                i += 1
            buckets.append((repr(b), i))
        buckets.append(("+Inf", len(xs)))
        hist.add_metric([scenario, target, *k], buckets, math.fsum(xs))
        for q in QUANTILES:
            quant.add_metric([scenario, target, *k, repr(q)], percentile(xs, q * 100))
    yield hist
    yield quant


def _run_families(scenario: str, target: str, doc: dict[str, Any], s: dict[str, Any]) -> Iterable[Any]:
    """The ended run's outcome: its info, passed, exit code, throughput, pass rate and thresholds."""
    labels = ["scenario", "target"]
    info = GaugeMetricFamily("kstress_run_info", "The run: 1, with its directory and kstress version as labels.", labels=labels + ["run", "version"])
    info.add_metric([scenario, target, str(doc.get("run_name") or ""), str(((doc.get("meta") or {}).get("host") or {}).get("harness_version") or "")], 1)
    yield info
    g = GaugeMetricFamily("kstress_run_passed", "1 when every check (and threshold) held.", labels=labels)
    g.add_metric([scenario, target], 1 if doc.get("passed") else 0)
    yield g
    if _num(doc.get("exit_code")):
        g = GaugeMetricFamily("kstress_run_exit_code", "The run's exit code (docs/results.md).", labels=labels)
        g.add_metric([scenario, target], doc["exit_code"])
        yield g
    if _num(s.get("throughput_per_s")):
        g = GaugeMetricFamily("kstress_throughput_per_second", "Passed turns per second over the load's span.", labels=labels)
        g.add_metric([scenario, target], s["throughput_per_s"])
        yield g
    if _num(s.get("pass_rate")):
        g = GaugeMetricFamily("kstress_pass_rate", "Passed / attempted.", labels=labels)
        g.add_metric([scenario, target], s["pass_rate"])
        yield g
    th = s.get("thresholds") or []
    if th:
        ok = GaugeMetricFamily("kstress_threshold_passed", "1 when the threshold held.", labels=labels + ["threshold"])
        val = GaugeMetricFamily("kstress_threshold_value", "The threshold's measured value, in base units.", labels=labels + ["threshold"])
        for t in th:
            ok.add_metric([scenario, target, t["expr"]], 1 if t.get("passed") else 0)
            if _num(t.get("value")):
                val.add_metric([scenario, target, t["expr"]], t["value"])
        yield ok
        yield val


def _resource_families(scenario: str, target: str, res: dict[str, Any]) -> Iterable[Any]:
    """The target's peaks over the run, the ones the sampler measured."""
    labels = ["scenario", "target"]
    for k, name, scale, help_ in (("peak_rss_mb", "kstress_target_peak_rss_bytes", 2**20, "Peak RSS of the target's process tree."),
                                  ("peak_cpu_pct", "kstress_target_peak_cpu_percent", 1, "Peak CPU of the target's process tree, % of one core."),
                                  ("peak_fds", "kstress_target_peak_fds", 1, "Peak open file descriptors of the target's process tree."),
                                  ("peak_children", "kstress_target_peak_children", 1, "Peak child processes of the target.")):
        if _num(res.get(k)):
            g = GaugeMetricFamily(name, help_, labels=labels)
            g.add_metric([scenario, target], res[k] * scale)
            yield g


def _scenario_families(scenario: str, target: str, s: dict[str, Any]) -> Iterable[Any]:
    """What only some summaries hold: abtest's speedups, findmax's level, the turn anatomy."""
    labels = ["scenario", "target"]
    if scenario == "abtest":
        g = GaugeMetricFamily("kstress_abtest_speedup", "Serial / concurrent tool time per batch size N (valid rows only).", labels=labels + ["n"])
        for r in s.get("rows") or ():
            if _num(r.get("speedup")):
                g.add_metric([scenario, target, str(r.get("n"))], r["speedup"])
        yield g
    if scenario == "findmax" and _num(s.get("max_level")):
        g = GaugeMetricFamily("kstress_findmax_max_level", "The maximum sustainable level.", labels=labels + ["unit"])
        g.add_metric([scenario, target, str(s.get("unit") or "")], s["max_level"])
        yield g
    an = s.get("anatomy") or {}
    if an:
        g = GaugeMetricFamily("kstress_anatomy_seconds", "Turn anatomy per marker: each part's p50 and p95 (passed turns).", labels=labels + ["marker", "part", "quantile"])
        for m, parts in sorted(an.items()):
            for part, qs in parts.items():
                if isinstance(qs, dict):
                    for q in ("p50", "p95"):
                        if _num(qs.get(q)):
                            g.add_metric([scenario, target, m, part.removesuffix("_s"), "0." + q[1:]], qs[q])
        yield g


class _RunCollector(Collector):
    def __init__(self, source: Callable[[], Iterable[Any]]) -> None:
        self.source = source

    def collect(self) -> Iterable[Any]:
        return list(self.source())


def render_prom(doc: dict[str, Any], rows: Sequence[dict[str, Any]]) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RunCollector(lambda: families(str(doc.get("scenario")), target_name(doc), rows, doc)))
    return generate_latest(reg).decode()


class LiveMetrics:
    """--metrics-port: the run's families served on 127.0.0.1:PORT/metrics
    while it goes (loopback only), stopped with the run."""

    def __init__(self, port: int, scenario: str, target: Callable[[], str], rows: list[dict[str, Any]]) -> None:
        from prometheus_client import start_http_server

        self.registry = CollectorRegistry(auto_describe=False)
        # a copy of the list: the event loop appends while the server thread reads
        self.registry.register(_RunCollector(lambda: families(scenario, target(), list(rows))))
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self.port = self.server.server_port
        print(f"kstress: metrics at http://127.0.0.1:{self.port}/metrics", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

