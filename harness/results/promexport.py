"""Prometheus / OpenMetrics text of a run, through the official client's
exposition (prometheus_client): `kstress report DIR --format prom` writes it
(node_exporter textfile style), `--metrics-port P` serves the same families
live while a run goes. Metric names and labels are in docs/results.md.

Everything is computed from the turn rows (and the summary, when the run has
ended) through one tally fed a row at a time, so the live and the stored view
agree and a live run keeps no row for them.
"""

from __future__ import annotations

import bisect
import math
import sys
import threading
from typing import Any, Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .aggregate import Quantiles

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
QUANTILES = (0.5, 0.9, 0.95, 0.99)
LOAD_KINDS = ("load", "interrupt", "session", "batch", "abtest", "cmp")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def target_name(doc: dict[str, Any]) -> str:
    ts = (doc.get("meta") or {}).get("targets") or []
    names = [t.get("label") or t.get("name") or t.get("socket") or "?" for t in ts]
    return ",".join(str(n) for n in names) or "?"


class Tally:
    """The turn families of a run, fed one row at a time: counts by series
    and result, failures by name, and each series' latency (bucket counts
    and quantiles, harness/results/aggregate.py), so that a long run's live
    metrics keep no row. Fed on the event loop, read by the metrics server's
    thread: both under one lock."""

    def __init__(self, scenario: str) -> None:
        # hold's load is its probe inputs; stress's probe is the replay-guard check, not load
        self.kinds = LOAD_KINDS + (("probe",) if scenario == "hold" else ())
        self.lock = threading.Lock()
        self.kernel = False  # several kernels at once: one series each
        self.results: dict[tuple[str, str, str], int] = {}
        self.names: dict[str, int] = {}
        self.lat: dict[tuple[str, str], tuple[Quantiles, list[int], list[float]]] = {}

    def feed(self, rows: Iterable[dict[str, Any]]) -> "Tally":
        for r in rows:
            self.add(r)
        return self

    def add(self, r: dict[str, Any]) -> None:
        if r.get("kind") not in self.kinds or r.get("warmup"):
            return
        with self.lock:
            if "kernel" in r:
                self.kernel = True
            series = (r.get("marker") or "text", str(r.get("kernel") or ""))
            passed = bool(r.get("passed"))
            k = series + ("passed" if passed else "failed",)
            self.results[k] = self.results.get(k, 0) + 1
            if not passed and r.get("failures"):
                n = str(r["failures"][0]).split(" ", 1)[0]
                self.names[n] = self.names.get(n, 0) + 1
            if passed and _num(r.get("latency_s")):
                x = r["latency_s"]
                got = self.lat.get(series)
                if got is None:
                    got = self.lat[series] = (Quantiles(), [0] * (len(BUCKETS) + 1), [0.0])
                got[0].add(x)
                got[1][bisect.bisect_left(BUCKETS, x)] += 1
                got[2][0] += x

    def families(self, scenario: str, target: str) -> list[Any]:
        with self.lock:
            return list(self._turn_families(scenario, target)) + list(self._latency_families(scenario, target))

    def _key(self, series: tuple[str, ...]) -> tuple[str, ...]:
        return series if self.kernel else series[:1]

    def _by(self) -> list[str]:
        return ["marker"] + (["kernel"] if self.kernel else [])

    def _turn_families(self, scenario: str, target: str) -> Iterable[Any]:
        """The turns judged, by marker and result, and the failed ones by failure name."""
        labels = ["scenario", "target"]
        counts = CounterMetricFamily("kstress_turns", "Turns judged, by marker and result (warm-up turns excluded).", labels=labels + self._by() + ["result"])
        tally: dict[tuple[str, ...], int] = {}
        for k, v in self.results.items():
            kk = self._key(k[:2]) + k[2:]
            tally[kk] = tally.get(kk, 0) + v
        for k, v in sorted(tally.items()):
            counts.add_metric([scenario, target, *k], v)
        yield counts
        fails = CounterMetricFamily("kstress_failures", "Failed turns by failure name (the first word of the first failure).", labels=labels + ["failure"])
        for n, v in sorted(self.names.items()):
            fails.add_metric([scenario, target, n], v)
        yield fails

    def _latency_families(self, scenario: str, target: str) -> Iterable[Any]:
        """Passed turns' latency: a histogram and nearest-rank quantiles per series."""
        labels = ["scenario", "target"]
        hist = HistogramMetricFamily("kstress_turn_latency_seconds", "Latency of passed turns, send to terminal frame.", labels=labels + self._by())
        quant = GaugeMetricFamily("kstress_turn_latency_quantile_seconds", "Nearest-rank quantiles of passed turns' latency.", labels=labels + self._by() + ["quantile"])
        for series, (q, counts, total) in sorted(self.lat.items()):
            k = self._key(series)
            buckets, acc = [], 0
            for b, c in zip(BUCKETS, counts):
                acc += c
                buckets.append((repr(b), acc))
            buckets.append(("+Inf", q.n))
            hist.add_metric([scenario, target, *k], buckets, total[0])
            for p in QUANTILES:
                quant.add_metric([scenario, target, *k, repr(p)], q.percentile(p * 100))
        yield hist
        yield quant


def families(scenario: str, target: str, rows: "Iterable[dict[str, Any]] | Tally", doc: dict[str, Any] | None = None) -> Iterable[Any]:
    """Every metric family of a run: the rows so far (or their tally), plus the final summary when ``doc`` is given."""
    tally = rows if isinstance(rows, Tally) else Tally(scenario).feed(rows)
    yield from tally.families(scenario, target)
    if doc is None:
        return
    s = doc.get("summary") or {}
    yield from _run_families(scenario, target, doc, s)
    yield from _resource_families(scenario, target, s.get("resources") or {})
    yield from _scenario_families(scenario, target, s)


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

    def __init__(self, port: int, scenario: str, target: Callable[[], str]) -> None:
        from prometheus_client import start_http_server

        self.tally = Tally(scenario)  # the runner feeds it each row
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_RunCollector(lambda: families(scenario, target(), self.tally)))
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self.port = self.server.server_port
        print(f"kstress: metrics at http://127.0.0.1:{self.port}/metrics", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

