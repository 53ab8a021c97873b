"""Results: the run directory (run.json, turns.jsonl, ...), the statistics
kstress prints, service levels (thresholds), the reports (Markdown, HTML with
charts, Prometheus) and the mechanics of comparing two stored runs. Reads
turn rows and knows no scenario by name; uses ``judge`` for failure names."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "aggregate": ("Ends", "Level", "Quantiles", "Sample"),
    "comparison": ("CompareSpec", "Comparison", "RunPair", "SHAPE", "by_marker", "compare_runs", "final_line", "holm", "latency_rows", "load_span",
                   "passed_latency", "refusals", "render", "resource_rows", "sample_row", "throughput_row", "verdict_row", "write_output"),
    "concurrency": ("Concurrency", "Sweep", "FINDING", "SERIAL_RATIO", "achieved", "finding_text", "line", "serialised", "summary"),
    "htmlreport": ("render_html",),
    "observed": ("count_log", "count_records", "llm_api_checks", "not_checked", "observed_entry"),
    "promexport": ("LiveMetrics", "render_prom"),
    "report": ("HTML_ENV", "check_html_env", "html_wanted", "checks_section", "fmt_ms", "fmt_num", "fmt_pct", "header", "latency_by_marker_section", "md_code", "md_text"),
    "rundir": ("Check", "FLUSH_EVERY_S", "RunDir", "host_meta", "read_run"),
    "runlist": ("list_runs", "table"),
    "stats": ("ALPHA", "LogHistogram", "MIN_EFFECT", "bootstrap_median", "bootstrap_ratio", "compare", "stability_warnings", "summarize"),
    "thresholds": ("LATENCY_PS", "check_mix_markers", "check_thresholds", "evaluate", "latency_by_marker", "latency_stats", "parse_thresholds", "span_s",
                   "throughput_windows", "add_by_marker", "add_end", "by_marker_of", "evaluate_levels", "latency_stats_of"),
})
