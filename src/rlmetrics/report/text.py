"""The report as text: a per-step table, then one short section per subject."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .numbers import fixed
from .regressions import render_regressions
from .summary import RunReport

__all__ = ["render", "render_runs", "steps_named"]

#: Hyperparameters the text report lists (the rest are counted).
HYPERPARAMS_SHOWN = 12
#: Characters of a sample cell the text report shows.
CELL_SHOWN = 72
#: Steps the per-step table shows in full; a longer run shows its first and last steps and a
#: mean row (``rlmetrics report --table-rows N``; ``--json`` has every step).
TABLE_ROWS = 20


def _s(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else fixed(value, digits)


def _g(value: float | None) -> str:
    """Four significant digits: a KL of 3e-08 is not 0.0000."""
    return "-" if value is None else f"{value:.4g}"


def _seconds(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {fixed(v)}s" for k, v in sorted(values.items())) or "none"


def render(report: RunReport, table_rows: int = TABLE_ROWS) -> str:
    lines = [
        f"Run report: {report.source or '(rows)'} ({report.rows} row{'s' * (report.rows != 1)}"
        + (f", {n} unreadable line{'s' * (n != 1)} skipped" if (n := report.skipped_lines) else "")
        + ")"
    ]
    if report.selection is not None:
        lines.append(
            f"Showing {report.selection}: {len(report.steps)} of the "
            f"{report.steps_logged} steps logged (regressions are judged on them all)"
        )
    lines += _identity(report)
    if report.steps:
        lines += _steps(report, table_rows)
    lines += _goodput(report.goodput)
    if report.setup is not None:
        phases = report.setup["phases"]
        shown = {k: v for k, v in phases.items() if k != "total_setup"}
        lines += [
            "",
            f"Setup: {_s(report.setup['total_setup_s'])} s total_setup, as logged "
            "(phases overlap, never summed)",
            "  "
            + ", ".join(
                f"{k} {fixed(v)}s" for k, v in sorted(shown.items(), key=lambda kv: -kv[1])
            ),
        ]
    if report.trends:
        lines += ["", "Trends (first -> last; mean of first / last quarter):"]
        for name, trend in report.trends.items():
            lines.append(
                f"  {name:<7} {trend['first']:.4g} -> {trend['last']:.4g}  "
                f"({trend['first_quarter_mean']:.4g} / {trend['last_quarter_mean']:.4g}; "
                f"min {trend['min']:.4g}, max {trend['max']:.4g})"
            )
    if report.vllm is not None:
        lines += _vllm(report.vllm)
    if report.checkpoints is not None:
        lines += _checkpoints(report.checkpoints)
    if report.hyperparams:
        lines += _hyperparams(report.hyperparams)
    if report.samples:
        lines += _samples(report.samples)
    if report.regressions is not None:
        lines += render_regressions(report.regressions)
    if report.signals is not None:
        lines += _signals(report.signals)
    return "\n".join(lines) + "\n"


def render_runs(reports: Sequence[RunReport], table_rows: int = TABLE_ROWS) -> str:
    """Each run's report in turn, with a line naming how many runs the file holds."""
    if len(reports) == 1:
        return render(reports[0], table_rows)
    ids = ", ".join(str(r.run_id) for r in reports)
    head = f"{len(reports)} runs in this file ({ids}); each is reported on its own.\n\n"
    return head + "\n".join(render(report, table_rows) for report in reports)


def _identity(report: RunReport) -> list[str]:
    lines = []
    if report.run_id is not None or report.resumed or report.repeated_steps:
        lines.append(
            f"Run {report.run_id}"
            + (f", resumed {report.resumed} time(s)" if report.resumed else "")
            + f": {len(report.steps)} steps"
            + (
                f" (its last attempt: started again {report.reruns} time(s) without resume)"
                if report.reruns
                else ""
            )
        )
    if report.repeated_steps:
        lines.append(
            f"  warning: steps {steps_named(report.repeated_steps)} were logged again after "
            "the run went back (a resumed run); each is shown as the last attempt logged it"
        )
    if report.key_map is not None:
        lines.append(f"Read through key map {report.key_map['name']!r} ({report.key_map['how']})")
    return lines


def steps_named(steps: Sequence[int]) -> str:
    """The first ten of ``steps`` and how many more: ``30, 31, ... 39 and 10 more``."""
    shown = ", ".join(str(s) for s in steps[:10])
    return shown + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")


def _flat(params: Mapping[str, Any], path: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in params.items():
        name = f"{path}{key}"
        if isinstance(value, Mapping):
            out += _flat(value, name + "/")
        else:
            out.append((name, value))
    return out


def _hyperparams(params: Mapping[str, Any]) -> list[str]:
    flat = _flat(params)
    lines = ["", f"Hyperparameters ({len(flat)}):"]
    lines += [f"  {k} = {_cell(v)}" for k, v in flat[:HYPERPARAMS_SHOWN]]
    if len(flat) > HYPERPARAMS_SHOWN:
        lines.append(f"  ... {len(flat) - HYPERPARAMS_SHOWN} more (the JSONL's hyperparams row)")
    return lines


def _cell(value: Any) -> str:
    text = " ".join(str(value).split())  # one line
    return text if len(text) <= CELL_SHOWN else text[: CELL_SHOWN - 1] + "…"


def _samples(samples: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        f"Samples: {samples['rows']} rows in {samples['tables']} table(s); the latest "
        f"({samples['latest_name']!s} at step {samples['latest_step']}), first rows:",
    ]
    for row in samples["shown"]:
        lines.append("  - " + "; ".join(f"{k}: {_cell(v)}" for k, v in row.items()))
    return lines


def _signals(signals: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    components = signals["reward_components"]
    if components:
        lines += ["", "Reward components (mean over steps; last):"]
        lines += [
            f"  {name:<16} {fixed(c['mean'], 3)}; {fixed(c['last'], 3)}"
            for name, c in components.items()
        ]
    datasets = signals["validation_datasets"]
    if datasets:
        lines += ["", "Validation by dataset (latest):"]
        for dataset, metrics in datasets.items():
            shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()))
            lines.append(f"  {dataset:<16} {shown}")
    vllm = signals["vllm"]
    if vllm:
        lines += ["", "vLLM engine state (mean over steps; last):"]
        for name, v in vllm.items():
            lines.append(
                f"  {name:<22} {fixed(v['mean'], 3)}; {fixed(v['last'], 3)} ({v['steps']} steps)"
            )
    gpus = signals["gpus"]
    if gpus:
        lines += ["", "GPUs (utilisation mean; most memory in use):"]
        for gpu, g in gpus.items():
            lines.append(
                f"  {gpu:<16} {_s(g['util_mean_pct'])} %; {_s(g['mem_gb_max'])} GiB "
                f"({g['readings']} readings)"
            )
    return lines


def _steps(report: RunReport, table_rows: int = TABLE_ROWS) -> list[str]:
    categories = sorted({c for s in report.steps for c in s["idle_s"]})
    short = [c.split("/", 1)[-1] for c in categories]
    header = ["step", "wall s", "goodput %", *[f"{c} s" for c in short], "reward", "kl", "loss"]

    def cells(s: Mapping[str, Any]) -> list[str]:
        return [
            str(s["step"]),
            _s(s["wall_time_s"]),
            _s(s.get("goodput_pct")),
            *[
                _s(s["idle_s"].get(c, 0.0) if s["wall_time_s"] is not None else None)
                for c in categories
            ],
            _s(s.get("reward"), 3),
            _g(s.get("kl")),
            _g(s.get("loss")),
        ]

    steps = report.steps
    hidden = len(steps) - table_rows
    if hidden <= 0:
        rows = [cells(s) for s in steps]
        note = []
    else:
        # The first steps and the latest ones, then the mean of every step.
        head = max(1, table_rows // 4)
        tail = table_rows - head
        gap = ["…"] + [""] * (len(header) - 1)
        rows = [
            *(cells(s) for s in steps[:head]),
            gap,
            *(cells(s) for s in steps[-tail:]),
            ["mean", *cells(_mean_step(steps, categories))[1:]],
        ]
        note = [
            f"  ({len(steps)} steps: {hidden} not shown; --steps A:B or --tail N shows others, "
            "--table-rows N more at once, --json every step)"
        ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return (
        ["", "Per step (idle = driver wall clock, step window):"]
        + [
            (
                "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
            ).rstrip()
            for row in (header, *rows)
        ]
        + note
    )


def _mean_step(steps: Sequence[Mapping[str, Any]], categories: Sequence[str]) -> dict[str, Any]:
    """A step row of the means of every column over ``steps`` (each over the steps that have
    a value)."""

    def mean(values: Sequence[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return sum(present) / len(present) if present else None

    timed = [s for s in steps if s["wall_time_s"] is not None]
    return {
        "step": None,
        "wall_time_s": mean([s["wall_time_s"] for s in steps]),
        "goodput_pct": mean([s.get("goodput_pct") for s in steps]),
        "idle_s": {c: mean([s["idle_s"].get(c, 0.0) for s in timed]) or 0.0 for c in categories},
        **{key: mean([s.get(key) for s in steps]) for key in ("reward", "kl", "loss")},
    }


def _goodput(goodput: Mapping[str, Any]) -> list[str]:
    if not goodput["steps"]:
        return ["", "Goodput: no step carried efficiency/step_wall_time_s"]
    lines = [
        "",
        f"Goodput over {goodput['steps']} steps: {_s(goodput['goodput_pct'])}% "
        f"({_s(goodput['productive_s'])} s productive of {_s(goodput['step_wall_time_s'])} s "
        "step wall time)",
        f"  idle (driver wall clock, summed over steps): {_seconds(goodput['idle_s'])}",
    ]
    if goodput["init_total_s"] is not None:
        lines.append(
            f"  overhead: init/total {_s(goodput['init_total_s'])} s before the first "
            "step (a run constant, counted once)"
        )
    if goodput["collector_wall_clock_s"]:
        lines.append(
            "  collector clock (cumulative, latest value, not comparable with the "
            f"driver's): {_seconds(goodput['collector_wall_clock_s'])}"
        )
    for category, values in sorted(goodput["thread_seconds"].items()):
        lines.append(
            f"  saturation: {category} {_s(values['threads_busy'], 2)} threads busy on average "
            f"({_s(values['thread_seconds'])} thread-seconds: not a duration)"
        )
    if goodput["unknown_categories"]:
        lines.append(
            f"  categories of unknown measurement, not shown: "
            f"{', '.join(goodput['unknown_categories'])}"
        )
    return lines


def _vllm(vllm: Mapping[str, Any]) -> list[str]:
    means = vllm["mean_of_step_means"]
    lines = [
        "",
        f"vLLM: {fixed(vllm['prompt_tokens'], 0)} prompt and {fixed(vllm['generation_tokens'], 0)} "
        f"generated tokens; {fixed(vllm['generations_ok'], 0)} generations ok, "
        f"{fixed(vllm['generations_failed'], 0)} failed"
        + (f" ({fixed(100 * vllm['failed_share'])}%)" if vllm["failed_share"] is not None else ""),
    ]
    if means:
        lines.append(
            "  mean lengths (mean of step means): "
            + ", ".join(
                f"{k.removesuffix('_length_mean')} {fixed(v, 0)} tokens"
                for k, v in sorted(means.items())
            )
        )
    if vllm["steps_without_reading"]:
        lines.append(
            f"  no engine reading at steps {vllm['steps_without_reading']} (an engine restarted "
            "mid-step: the step's work is unknowable, so it is left out, not guessed)"
        )
    return lines


def _checkpoints(checkpoints: Mapping[str, Any]) -> list[str]:
    attempts = checkpoints["attempts"]
    lines = [
        "",
        "Rollout checkpoints: "
        + (
            ", ".join(f"{n} {outcome}" for outcome, n in sorted(attempts.items()))
            or "no scheduled attempts"
        )
        + (
            ""
            if not checkpoints["reasons"]
            else " (reasons: "
            + ", ".join(f"{r} {n}" for r, n in sorted(checkpoints["reasons"].items()))
            + ")"
        ),
    ]
    for what, key in (("save", "save_latency_s"), ("restore", "restore_latency_s")):
        latency = checkpoints[key]
        if latency is not None:
            lines.append(
                f"  {what} latency over {latency['count']}: p50 {fixed(latency['p50'], 2)} s, "
                f"mean {fixed(latency['mean'], 2)} s, max {fixed(latency['max'], 2)} s"
            )
    return lines
