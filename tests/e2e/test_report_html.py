"""report.html opened in a real headless Chromium (the system's, driven by
playwright), networking off: every chart rendered, no script error, nothing
fetched; a screenshot of each under the test's tmp dir. A 10,000-turn run's
page stays under 5 MB and loads in under 5 s. Plus the other views of a
stored run: --format prom (parsed by the Prometheus client's own parser),
json, -o FILE; --metrics-port live; runs/latest and `kstress runs`; secrets
the target file marks are redacted everywhere a person reads."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("draws_html")]  # these tests read report.html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def open_in_browser(html: Path, shot: Path) -> dict:
    """Load the page offline; what rendered, what went wrong, how long it took."""
    if CHROMIUM is None:
        pytest.fail("no chromium on this machine: `make test` installs it (scripts/ensure-chromium.sh), or apt-get install chromium")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    fetched: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            ctx = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
            ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else (fetched.append(route.request.url), route.abort())[1])
            page = ctx.new_page()
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            t0 = time.monotonic()
            page.goto(html.as_uri(), wait_until="load", timeout=30_000)
            load_s = time.monotonic() - t0
            charts = page.evaluate("""() => [...document.querySelectorAll('figure.chart')].map(f => {
                const svg = f.querySelector('svg'); const r = svg ? svg.getBoundingClientRect() : null;
                return {name: f.dataset.chart, w: r ? r.width : 0, h: r ? r.height : 0,
                        drawn: svg ? svg.querySelectorAll('path, use, image, text').length : 0}; })""")
            declared = int(page.evaluate("() => document.querySelector('#charts').dataset.charts"))
            tables = page.evaluate("() => document.querySelectorAll('#report table, body > table').length")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    return {"charts": charts, "declared": declared, "errors": errors, "fetched": fetched, "load_s": load_s, "tables": tables}


@pytest.mark.parametrize("argv,want", [
    (("stress", "--launch", "--conns", "4", "--inputs", "6", "--stage", "1s:4", "--stage", "1s:4", "--warmup", "300ms"),
     {"latency-over-time", "latency-cdf", "inflight-throughput", "anatomy", "kernel-counters", "resources"}),
    (("abtest", "--launch", "--n", "2,4", "--rounds", "3", "--tool-ms", "100"), {"abtest-speedup"}),
    (("cmp", "refkernel", "refkernel", "--rounds", "3", "--bombard-conns", "4", "--bombard-rounds", "1", "--stability-rounds", "3", "--tool-ms", "100"),
     {"cmp-distributions"}),
], ids=["stress", "abtest", "cmp"])
def test_report_html_renders_every_chart_offline_in_a_real_browser(cli, tmp_path, argv, want):
    r = cli.run(*argv, "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = run_dir(r)
    html = d / "report.html"
    assert html.exists() and "[report.html](report.html)" in (d / "report.md").read_text()
    seen = open_in_browser(html, tmp_path / f"{argv[0]}.png")
    names = {c["name"] for c in seen["charts"]}
    assert want <= names, names
    assert seen["declared"] == len(seen["charts"]) > 0
    assert all(c["w"] > 100 and c["h"] > 50 and c["drawn"] > 10 for c in seen["charts"]), seen["charts"]
    assert seen["errors"] == [] and seen["fetched"] == [], (seen["errors"], seen["fetched"])
    assert seen["tables"] >= 1  # the Markdown report's tables, rendered
    assert (tmp_path / f"{argv[0]}.png").stat().st_size > 10_000


@pytest.fixture
def instant_kernel(tmp_path):
    """bench/instant_kernel.py: a kernel process that answers every input at
    once with the verdict the mock would sign, under a key it shares with the
    run (10,000 turns in seconds, not the minute the reference kernel and its
    mock take: 65-77 s of CI)."""
    from harness.sandbox.launcher import read_line

    sock = tmp_path / "k.sock"
    env = dict(os.environ, KSTRESS_VERDICT_KEY="6b7374726573732d7265706f72742d6b6579", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "instant_kernel.py"), "--socket", str(sock), "--token", "t"],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        line = read_line(proc, 15)
        assert line and "listening" in line, line
        yield sock, env["KSTRESS_VERDICT_KEY"]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_10000_turn_report_is_small_and_quick(cli, tmp_path, instant_kernel):
    sock, key = instant_kernel
    cli.env["KSTRESS_VERDICT_KEY"] = key
    r = cli.run("stress", "--socket", str(sock), "--token", "t", "--conns", "50", "--inputs", "200", "--mix", "text:1", "--no-dedup-probe", "--quiet",
                "--out", str(cli.out), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = run_dir(r)
    assert json.loads((d / "run.json").read_text())["summary"]["attempted"] == 10_000
    size = (d / "report.html").stat().st_size
    assert size < 5 * 2**20, size
    seen = open_in_browser(d / "report.html", tmp_path / "big.png")
    assert seen["load_s"] < 5.0 and seen["errors"] == [], seen
    assert {"latency-over-time", "latency-cdf"} <= {c["name"] for c in seen["charts"]}


def test_report_formats_re_render_from_the_raw_files(cli, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    r = cli.run("stress", "--launch", "--conns", "2", "--inputs", "4", "--mix", "!batch2:1,text:1", "--threshold", "p95<30s", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(r)
    assert (cli.out / "latest").resolve() == d.resolve()
    prom = cli.run("report", str(d), "--format", "prom")
    assert prom.returncode == 0, prom.stderr
    fams = {f.name: f for f in text_string_to_metric_families(prom.stdout)}
    assert {"kstress_turns", "kstress_turn_latency_seconds", "kstress_turn_latency_quantile_seconds", "kstress_run_passed",
            "kstress_threshold_passed", "kstress_throughput_per_second"} <= set(fams), sorted(fams)
    turns = fams["kstress_turns"].samples
    assert sum(s.value for s in turns) == 8 and {s.labels["marker"] for s in turns} == {"!batch2", "text"}
    assert all(s.labels["scenario"] == "stress" and s.labels["target"] == "refkernel" for s in turns)
    assert [s.value for s in fams["kstress_run_passed"].samples] == [1]
    as_json = json.loads(cli.run("report", str(cli.out / "latest"), "--format", "json").stdout)
    assert as_json["summary"]["attempted"] == 8 and as_json["passed"] is True
    out = tmp_path / "again.html"
    h = cli.run("report", str(d), "--format", "html", "-o", str(out))
    assert h.returncode == 0 and out.read_text().startswith("<!DOCTYPE html>") and 'data-chart="latency-cdf"' in out.read_text()
    listing = cli.run("runs", "--out", str(cli.out))
    assert listing.returncode == 0 and d.name + " (latest)" in listing.stdout and "8/8 passed" in listing.stdout
    rows = [json.loads(x) for x in cli.run("runs", "--out", str(cli.out), "--json").stdout.splitlines()]
    assert rows[0]["run"] == d.name and rows[0]["verdict"] == "PASS"


def test_metrics_port_serves_the_run_live(cli):
    p = subprocess.Popen([sys.executable, "-m", "harness", "stress", "--launch", "--quiet", "--out", str(cli.out), "--duration", "6s",
                          "--conns", "2", "--mix", "text:1", "--metrics-port", "0"], cwd=REPO, env=cli.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/metrics", line)
        assert url, line
        deadline, passed = time.monotonic() + 30, 0.0
        while time.monotonic() < deadline and p.poll() is None:
            body = urllib.request.urlopen(url.group(0), timeout=5).read().decode()
            m = re.search(r'kstress_turns_total\{[^}]*result="passed"[^}]*\} (\S+)', body)
            if m and float(m.group(1)) > 0:
                passed = float(m.group(1))
                break
            time.sleep(0.2)  # polling a live endpoint, bounded by the deadline
        assert passed > 0, "the live endpoint never showed a passed turn while the run went"
    finally:
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, out + err


def test_secrets_the_target_file_marks_are_redacted(cli, tmp_path):
    secret = "sk-test-SECRET-0815"
    target = tmp_path / "kernel.toml"
    target.write_text(f'[target]\nbin = "refkernel"\nargs = ["--llm-api-key", "{secret}"]\nsecret = ["--llm-api-key"]\n')
    r = cli.run("stress", "--launch", "--target", str(target), "--conns", "2", "--inputs", "2", "--mix", "text:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(r)
    for name in ("run.json", "report.md", "report.html"):
        text = (d / name).read_text()
        assert secret not in text and "[redacted]" in text, name
    assert secret not in cli.run("report", str(d), "--format", "prom").stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[target]\nbin = "refkernel"\nsecret = "--llm-api-key"\n')
    b = cli.run("stress", "--launch", "--target", str(bad), "--quiet", "--out", str(cli.out))
    assert b.returncode == 2 and "secret must be a list" in b.stderr


def test_kstress_html_0_leaves_the_page_out_and_report_draws_it_later(cli):
    """KSTRESS_HTML=0 (a loop of runs that reads run.json): no report.html, the
    header says how to draw it, and `kstress report --format html` draws it
    from the run's files; a value it does not know is refused before the run."""
    cli.env["KSTRESS_HTML"] = "0"
    r = cli.run("stress", "--launch", "--conns", "2", "--inputs", "2", "--mix", "text:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(r)
    assert not (d / "report.html").exists() and (d / "run.json").exists()
    md = (d / "report.md").read_text()
    assert "[report.html](report.html)" not in md and "no report.html (KSTRESS_HTML=0)" in md, md[:800]
    page = cli.run("report", str(d), "--format", "html", "-o", str(d / "report.html"))
    assert page.returncode == 0, page.stderr
    html = (d / "report.html").read_text()
    assert 'data-chart="latency-over-time"' in html and "4/4" in html, html[:2000]
    cli.env["KSTRESS_HTML"] = "maybe"
    before = set(cli.out.iterdir()) if cli.out.exists() else set()
    bad = cli.run("stress", "--launch", "--conns", "2", "--inputs", "2", "--quiet", "--out", str(cli.out))
    assert bad.returncode == 2 and "KSTRESS_HTML='maybe' is invalid" in bad.stderr, bad.stdout + bad.stderr
    assert (set(cli.out.iterdir()) if cli.out.exists() else set()) == before
