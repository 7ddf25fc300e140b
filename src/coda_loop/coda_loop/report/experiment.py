# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The experiment table: CoDA against the baselines, as Markdown and as an HTML page with bar charts.

Input is the JSON of ``coda experiment``::

    {"results": {method: {split: {"mean": x, "std": y, "se": e, "episodes": n}}}, "budget": n, "rounds": r,
     "seeds": [...], "per_round": {method: [{"round": i, "split": s, "mean": x}]}}   # se, episodes, per_round optional

Rows are the methods (``METHODS`` order first, then any other method in the input); columns the
splits ``id``, ``position``, ``instruction``, ``object``, ``distractor`` and the OOD mean; cells
``mean ± std``. The OOD mean of a method is its ``ood`` entry when the input has one (computed per
seed, the exact spread); otherwise the mean of its four OOD split means, with the mean of their
spreads as ``±`` (an upper bound of the spread of the average), and the table says so. The range of the
``se`` entries (binomial standard errors from the held-out episodes) is given under the table.
Pure module: no rclpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coda_loop.budget import budget_table
from coda_loop.report.svg import esc, grouped_bar_chart, line_chart

METHODS: tuple[str, ...] = ("sft", "open_loop", "closed_loop", "dagger", "closed_loop_dagger", "coda_pass_fail",
                             "coda_no_potential", "coda_no_memory", "coda")
"""Methods in table order."""
METHOD_NAMES: dict[str, str] = {
    "sft": "SFT only",
    "open_loop": "open-loop generation",
    "closed_loop": "closed-loop (no critic)",
    "dagger": "DAgger (open-loop + corrective)",
    "closed_loop_dagger": "closed-loop + corrective",
    "coda_pass_fail": "CoDA, pass/fail diagnoses",
    "coda_no_potential": "CoDA w/o Text2potential",
    "coda_no_memory": "CoDA w/o memory",
    "coda": "CoDA",
}
"""Readable method names."""
SPLITS: tuple[str, ...] = ("id", "position", "instruction", "object", "distractor")
"""Split columns."""
OOD_SPLITS: tuple[str, ...] = SPLITS[1:]
"""Splits averaged into the OOD mean."""
OOD = "ood"
"""Key of an exact OOD mean entry in ``results[method]``."""


class ExperimentInputError(ValueError):
    """An experiment result that cannot be rendered; the message names the key that is wrong."""


def _cell(entry: Any, where: str) -> tuple[float, float]:
    if not isinstance(entry, Mapping) or "mean" not in entry:
        raise ExperimentInputError(f"{where}: expected {{'mean': x, 'std': y}}, got {entry!r}")
    try:
        mean, std = float(entry["mean"]), float(entry.get("std", 0.0))
    except (TypeError, ValueError) as exc:
        raise ExperimentInputError(f"{where}: mean/std are not numbers ({exc})") from exc
    if not (math.isfinite(mean) and math.isfinite(std)) or std < 0:
        raise ExperimentInputError(f"{where}: mean={mean}, std={std} (need finite values, std >= 0)")
    return mean, std


def table_cells(result: Mapping[str, Any]) -> tuple[list[str], dict[str, dict[str, tuple[float, float] | None]], bool]:
    """Return the methods in order, their cells and whether an OOD mean was estimated.

    Cells are per column (splits + ``ood``; ``None`` when missing); an OOD mean is estimated from the split
    spreads when the method has no ``ood`` entry.
    """
    results = result.get("results") if isinstance(result, Mapping) else None
    if not isinstance(results, Mapping) or not results:
        raise ExperimentInputError(
            "the experiment JSON has no non-empty 'results' object ({method: {split: {'mean': x, 'std': y}}})"
        )
    methods = [m for m in METHODS if m in results] + sorted(m for m in results if m not in METHODS)
    cells: dict[str, dict[str, tuple[float, float] | None]] = {}
    estimated = False
    for method in methods:
        per_split = results[method]
        if not isinstance(per_split, Mapping):
            raise ExperimentInputError(f"results[{method!r}]: expected {{split: {{mean, std}}}}, got {per_split!r}")
        row: dict[str, tuple[float, float] | None] = {
            split: _cell(per_split[split], f"results[{method!r}][{split!r}]") if split in per_split else None
            for split in SPLITS
        }
        if OOD in per_split:
            row[OOD] = _cell(per_split[OOD], f"results[{method!r}][{OOD!r}]")
        elif all(row[s] is not None for s in OOD_SPLITS):
            values = [row[s] for s in OOD_SPLITS]
            row[OOD] = (sum(v[0] for v in values if v) / len(values), sum(v[1] for v in values if v) / len(values))
            estimated = True
        else:
            row[OOD] = None
        cells[method] = row
    return methods, cells, estimated


def _fmt(cell: tuple[float, float] | None) -> str:
    return "n/a" if cell is None else f"{cell[0]:.3f} ± {cell[1]:.3f}"


def _setup_line(result: Mapping[str, Any]) -> str:
    seeds = result.get("seeds", [])
    seeds_text = (
        ", ".join(str(s) for s in seeds) if isinstance(seeds, Sequence) and not isinstance(seeds, str) else str(seeds)
    )
    return (
        f"budget {result.get('budget', '?')} scenes per round, {result.get('rounds', '?')} rounds, seeds [{seeds_text}]"
    )


def _standard_errors(result: Mapping[str, Any]) -> dict[str, list[float]]:
    """Return the ``se`` entries of the result: of the splits and of the OOD means (empty when there are none)."""
    found: dict[str, list[float]] = {"split": [], "ood": []}
    results = result.get("results")
    for per_split in (results.values() if isinstance(results, Mapping) else []):
        for split, entry in (per_split.items() if isinstance(per_split, Mapping) else []):
            value = entry.get("se") if isinstance(entry, Mapping) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                found["ood" if split == OOD else "split"].append(float(value))
    return found if found["split"] else {}


def markdown(result: Mapping[str, Any]) -> str:
    """Return the Markdown table (with a line on the setup and how the OOD mean is computed)."""
    methods, cells, estimated = table_cells(result)
    header = ["method", *SPLITS, "OOD mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    for method in methods:
        row = cells[method]
        name = method.replace("|", "\\|")
        lines.append("| " + " | ".join([name, *[_fmt(row[s]) for s in SPLITS], _fmt(row[OOD])]) + " |")
    notes = [f"Success rate, mean ± std over seeds; {_setup_line(result)}."]
    if estimated:
        notes.append(
            "OOD mean: mean of the position, instruction, object and distractor means; its ± is the mean of "
            "their stds (an upper bound of the spread of the average)."
        )
    errors = _standard_errors(result)
    if errors:
        seeds = result.get("seeds", [])
        one = isinstance(seeds, Sequence) and len(seeds) == 1
        notes.append(
            f"Sampling error: the binomial standard error of a split's mean from its held-out episodes is "
            f"{min(errors['split']):.3f}-{max(errors['split']):.3f}"
            + (f", of an OOD mean {min(errors['ood']):.3f}-{max(errors['ood']):.3f}" if errors["ood"] else "")
            + (" (one seed: the ± over seeds is 0 by construction; differences smaller than about twice the "
               "standard error are within sampling noise)." if one else ".")
        )
    missing = [m for m in METHODS if m not in cells]
    if missing:
        notes.append(f"Not in this result: {', '.join(missing)}.")
    code = _code_line(result)
    if code:
        notes.append(code)
    budgets = {m: {s: r["budget"] for s, r in by_seed.items() if isinstance(r, dict) and r.get("budget")}
               for m, by_seed in (result.get("runs") or {}).items()}
    return ("\n".join(lines) + "\n\n" + "\n".join(notes) + "\n" + _paired_table(result) + _validation_table(result)
            + budget_table(budgets))


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def _paired_table(result: Mapping[str, Any]) -> str:
    """Return the table of paired differences (optional key ``paired``: method -> {"test"|"validation": ...})."""
    paired = result.get("paired") or {}
    if not isinstance(paired, Mapping) or not paired:
        return ""
    lines = ["", "Paired: CoDA minus each method in OOD mean, on the same held-out scenes and seeds (95% bootstrap "
             "interval over scenes and seeds; an interval above 0 means CoDA is ahead).", "",
             "| method | test suites | validation suites |", "| --- | ---: | ---: |"]
    for method in [m for m in METHODS if m in paired] + sorted(m for m in paired if m not in METHODS):
        cells = []
        for kind in ("test", "validation"):
            entry = paired[method].get(kind) if isinstance(paired[method], Mapping) else None
            if not isinstance(entry, Mapping) or "diff" not in entry:
                cells.append("n/a" if not isinstance(entry, Mapping) else f"n/a ({entry.get('error', '')})")
                continue
            low, high = entry["ci"]
            cells.append(f"{_signed(entry['diff'])} [{_signed(low)}, {_signed(high)}]" + _fewer_seeds(entry, result))
        lines.append(f"| {method} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def _fewer_seeds(entry: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    """Return " (seeds ...)" when the pair covers fewer seeds than the experiment (a method not run on every seed)."""
    paired = sorted(int(seed) for seed in entry.get("per_seed") or {})
    every = sorted(int(seed) for seed in result.get("seeds") or [])
    if not paired or not every or paired == every:
        return ""
    return f" (seeds {', '.join(map(str, paired))})"


def _validation_table(result: Mapping[str, Any]) -> str:
    """Return the table of success on the validation suites (optional key ``validation``, like ``results``)."""
    validation = result.get("validation") or {}
    if not isinstance(validation, Mapping) or not validation:
        return ""
    _, cells, _ = table_cells({"results": validation})
    header = ["method", *SPLITS, "OOD mean"]
    lines = ["", "Validation suites (the same generators as the test suites, other seeds; designs are chosen on "
             "these):", "", "| " + " | ".join(header) + " |",
             "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    for method in [m for m in METHODS if m in cells] + sorted(m for m in cells if m not in METHODS):
        row = cells[method]
        lines.append("| " + " | ".join([method, *[_fmt(row[s]) for s in SPLITS], _fmt(row[OOD])]) + " |")
    return "\n".join(lines) + "\n"


def _code_line(result: Mapping[str, Any]) -> str:
    """Which commits the runs were computed with (optional key ``code``: method -> seed -> labels); '' if absent."""
    code = result.get("code") or {}
    if not isinstance(code, Mapping):
        raise ExperimentInputError(f"code: expected {{method: {{seed: [commit, ...]}}}}, got {code!r}")
    runs = {(str(m), str(s)): tuple(labels) for m, seeds in code.items() for s, labels in dict(seeds).items()}
    if not runs:
        return ""
    distinct = sorted({label for labels in runs.values() for label in labels})
    if len(distinct) == 1:
        return f"Code: every run computed with {distinct[0]}."
    parts = [f"{m} seed {s}: {' then '.join(labels) or 'unknown'}" for (m, s), labels in sorted(runs.items())]
    return "Code (runs were computed with more than one commit): " + "; ".join(parts) + "."


def _per_round(result: Mapping[str, Any]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Map split -> method -> [(round, mean)] from the optional ``per_round`` key."""
    per_round = result.get("per_round") or {}
    if not isinstance(per_round, Mapping):
        raise ExperimentInputError(f"per_round: expected {{method: [{{round, split, mean}}]}}, got {per_round!r}")
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for method, rows in per_round.items():
        if not isinstance(rows, list):
            raise ExperimentInputError(f"per_round[{method!r}]: expected a list of {{round, split, mean}}")
        for i, row in enumerate(rows):
            try:
                rnd, split, mean = int(row["round"]), str(row["split"]), float(row["mean"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ExperimentInputError(f"per_round[{method!r}][{i}]: need round, split, mean ({exc!r})") from exc
            out.setdefault(split, {}).setdefault(str(method), []).append((rnd, mean))
    return out


def round_means(rows: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Return round -> the mean of its values (one per seed in a result over several seeds)."""
    values: dict[int, list[float]] = {}
    for rnd, value in rows:
        values.setdefault(rnd, []).append(value)
    return {rnd: sum(v) / len(v) for rnd, v in values.items()}


def html_page(result: Mapping[str, Any]) -> str:
    """Return the HTML page: the table, a grouped bar chart of every method per split, per-round lines."""
    methods, cells, estimated = table_cells(result)
    columns = [*SPLITS, OOD]
    series = {METHOD_NAMES.get(m, m): [c[0] if (c := cells[m][s]) else None for s in columns] for m in methods}
    errors = {METHOD_NAMES.get(m, m): [c[1] if (c := cells[m][s]) else None for s in columns] for m in methods}
    chart = grouped_bar_chart(
        title="Success per split (mean ± std over seeds)",
        x_label="evaluation split",
        y_label="success rate",
        groups=[*SPLITS, "OOD mean"],
        series=series,
        errors=errors,
        y_min=0.0,
        y_max=1.0,
    )
    head = "".join(f"<th>{esc(h)}</th>" for h in ["method", *SPLITS, "OOD mean"])
    body = "".join(
        "<tr>"
        + f"<td>{esc(METHOD_NAMES.get(m, m))} <code>{esc(m)}</code></td>"
        + "".join(f'<td class="num">{esc(_fmt(cells[m][c]))}</td>' for c in columns)
        + "</tr>"
        for m in methods
    )
    per_round = _per_round(result)
    lines = []
    for split in sorted(per_round, key=lambda s: (SPLITS.index(s) if s in SPLITS else len(SPLITS), s)):
        by_method = per_round[split]
        rounds = sorted({r for values in by_method.values() for r, _ in values})
        ordered = [m for m in METHODS if m in by_method] + sorted(m for m in by_method if m not in METHODS)
        line_series = {}
        for method in ordered:
            lookup = round_means(by_method[method])
            line_series[METHOD_NAMES.get(method, method)] = [lookup.get(r) for r in rounds]
        lines.append(
            line_chart(
                title=("Success per round (mean over seeds): OOD mean" if split == OOD
                       else f"Success per round (mean over seeds): split {split}"),
                x_label="round",
                y_label="success rate",
                x=rounds,
                series=line_series,
                y_min=0.0,
                y_max=1.0,
            )
        )
    note = (
        '<p class="muted">OOD mean: mean of the four OOD split means; ± is the mean of their stds (an upper '
        "bound of the spread of the average).</p>"
        if estimated
        else ""
    )
    css = (
        "body{font-family:sans-serif;margin:24px auto;max-width:1000px;color:#222;padding:0 16px}"
        "table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px}"
        "th{background:#f2f2f2}td.num{text-align:right}.muted{color:#666;font-size:13px}"
        "svg{display:block;margin:12px 0}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>CoDA experiment</title>'
        f"<style>{css}</style></head><body><h1>CoDA against the baselines</h1>"
        f'<p class="muted">Success rate, mean ± std over seeds; {esc(_setup_line(result))}.</p>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}{chart}"
        + "".join(lines)
        + "</body></html>\n"
    )


def render_experiment(result: dict, out_dir: Path) -> tuple[Path, Path]:
    """Write ``out_dir/results.md`` and ``out_dir/results.html``; return their paths.

    Raises :class:`ExperimentInputError` (naming the key) before writing anything when the input is malformed.
    """
    md, page = markdown(result), html_page(result)
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, html_path = out_dir / "results.md", out_dir / "results.html"
    md_path.write_text(md, encoding="utf-8")
    html_path.write_text(page, encoding="utf-8")
    return md_path, html_path
