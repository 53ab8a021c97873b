"""Everything a kernel or a user supplies is quoted, never obeyed, in every
format a run is shown in (issue 22 item 9): a real run against a kernel whose
error codes, messages, replies and stats carry a ``<meta http-equiv="refresh">``,
``|``, a newline, ``"`` and ``\\``; then the same values as the target's name,
through the real report writer. report.html has no live tag (parsed with
html.parser), report.md's table rows keep their column count, and the .prom
text parses with prometheus_client's own parser, the label values round-tripped."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hostilekernel import HOSTILE, HOSTILE_CODE  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("draws_html")]  # these tests read report.html


class Page(HTMLParser):
    """The tags a browser would act on, and the text it would show."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    return p


def assert_inert(html: str, *shown: str) -> None:
    page = parsed(html)
    metas = [a for t, a in page.tags if t == "meta"]
    # only the page's own two: the charset and the Content-Security-Policy
    assert [sorted(a) for a in metas] == [["charset"], ["content", "http-equiv"]], metas
    assert not any(a.get("http-equiv", "").lower() == "refresh" for a in metas)
    assert not [t for t, _ in page.tags if t == "b"], "a kernel's <b> became a tag"
    text = "".join(page.text)
    for s in shown:
        assert s in text, f"{s!r} is not shown on the page as text"


def cells(line: str) -> list[str]:
    """A Markdown table row's cells: split at each ``|`` no backslash escapes
    (report.md never puts a ``|`` inside a code span: report.md_code)."""
    out, cur, i = [], "", 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            cur += line[i:i + 2]
            i += 2
            continue
        if c == "|":
            out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur)
    return out[1:-1]


def assert_tables_keep_their_columns(md: str) -> int:
    """Every row of every table has its header's number of cells; returns the rows seen."""
    rows, width = 0, None
    for line in md.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        n = len(cells(line))
        if width is None:
            width = n
        assert n == width, f"a table row has {n} cells, its header {width}: {line!r}"
        rows += 1
    return rows


def prom_families(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def kernel_file(tmp_path: Path) -> Path:
    w = tmp_path / "hostile-kernel"
    w.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'hostilekernel.py'} \"$@\"\n")
    w.chmod(0o755)
    return w


def test_a_hostile_kernel_and_target_name_are_quoted_in_html_markdown_and_prometheus(cli, tmp_path):
    r = cli.run("stress", "--launch", "--bin", str(kernel_file(tmp_path)), "--contract", "stats=true", "--conns", "2", "--inputs", "4",
                "--mix", "text:1,!batch2:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    d = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    failure = f"error_frame:{HOSTILE_CODE}"
    summary = json.loads((d / "run.json").read_text())["summary"]
    assert summary["failures"].get(failure), summary["failures"]  # the hostile values reached the report, raw in run.json

    md = (d / "report.md").read_text()
    assert "<meta" not in md and "<b>" not in md
    assert assert_tables_keep_their_columns(md) >= 6
    row = next(ln for ln in md.splitlines() if ln.startswith("| error_frame:"))
    assert cells(row)[1].strip() == str(summary["failures"][failure])  # the count stayed in its column

    assert_inert((d / "report.html").read_text(), '<meta http-equiv="refresh" content="0;url=http://x">', failure)

    prom = cli.run("report", str(d), "--format", "prom")
    assert prom.returncode == 0, prom.stderr
    fails = prom_families(prom.stdout)["kstress_failures"].samples
    assert failure in {s.labels["failure"] for s in fails}, fails

    # the same values as the target's name: run.json as a user could have written it, through `kstress report`
    doc = json.loads((d / "run.json").read_text())
    doc["meta"]["targets"][0]["name"] = HOSTILE
    (d / "run.json").write_text(json.dumps(doc))
    md2 = cli.run("report", str(d), "--format", "md")
    assert md2.returncode == 0, md2.stderr
    assert "<meta" not in md2.stdout and assert_tables_keep_their_columns(md2.stdout) >= 6
    page = cli.run("report", str(d), "--format", "html")
    assert page.returncode == 0, page.stderr
    assert_inert(page.stdout, '<meta http-equiv="refresh" content="0;url=http://x">')
    prom2 = cli.run("report", str(d), "--format", "prom")
    targets = {s.labels["target"] for s in prom_families(prom2.stdout)["kstress_turns"].samples}
    assert targets == {HOSTILE}, targets


@pytest.mark.parametrize("value", [HOSTILE, HOSTILE_CODE, "a|b", "x\r\ny", "`code`", "[link](http://x)", "&lt;b&gt;"])
def test_md_text_is_one_inert_table_cell(value):
    """md_text as Python-Markdown renders it in a table: one cell, its text exactly the value (newlines shown as ⏎)."""
    from harness.results.htmlreport import _markdown_without_html
    from harness.results.report import md_code, md_text

    for quote in (md_text, md_code):
        md = f"| a | b |\n|---|---|\n| {quote(value)} | z |\n"
        assert len(cells(md.splitlines()[2])) == 2
        page = parsed(_markdown_without_html(md))
        assert [t for t, _ in page.tags].count("td") == 2 and not {"a", "code", "meta", "b"} & {t for t, _ in page.tags if quote is md_text}
        shown = re.sub(r"\s+", " ", "".join(page.text))
        assert re.sub(r"\s+", " ", value.replace("\r\n", " ⏎ ").replace("\n", " ⏎ ")) in shown, (quote.__name__, shown)
