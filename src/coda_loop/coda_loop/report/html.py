# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The run report: one self-contained HTML page of a run folder's memory.

:func:`~coda_loop.report.data.collect` reads a :class:`~coda_loop.memory.MemoryStore` into plain data
(:class:`~coda_loop.report.data.ReportData`); :func:`render` turns that into the page: four inline SVG plots (success
per round per split, failure modes over rounds, budget allocation over rounds, potential-stage
progress) and the tables (progress, policy versions, diagnoses per round, generated programs).
The page has no scripts, no external fonts, styles or images: it opens offline. Every string
that comes from the database is escaped. Pure module: no rclpy.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coda_loop.report.data import (
    Item,
    ReportData,
    allocation_label,
    budget_allocation,
    collect,
    failure_modes,
    open_store,
    program_round,
    split_key,
    stage_progress,
    success_by_split,
)
from coda_loop.report.svg import esc, line_chart, stacked_bar_chart

# ---------------------------------------------------------------------------------------------------------------------
# rendering

CSS = """
body { font-family: sans-serif; margin: 24px auto; max-width: 1100px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; margin-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.notice { background: #fff4d6; border: 1px solid #e0b84c; padding: 10px 14px; margin: 12px 0; }
.muted { color: #666; font-size: 13px; } .plots svg { display: block; margin: 12px 0; }
code { font-size: 12px; } pre { margin: 0; font-size: 11px; white-space: pre-wrap; }
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = (), cls: str = "") -> str:
    """Return an HTML table; every cell is escaped unless it is a :class:`_Raw`."""
    out = [
        f'<table class="{esc(cls)}"><thead><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in headers)
        + "</tr></thead><tbody>"
    ]
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            text = cell.html if isinstance(cell, _Raw) else esc(cell)
            cells.append(f'<td class="num">{text}</td>' if i in numeric else f"<td>{text}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


@dataclass(frozen=True)
class _Raw:
    """Markup built here from escaped parts (never from database text directly)."""

    html: str


def _rate(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any, limit: int = 200) -> str:
    if isinstance(value, Mapping):
        text = ", ".join(f"{k}={_compact(v, 60)}" for k, v in value.items())
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, list | tuple):
        text = json.dumps(value, default=str)
    else:
        text = str(value)
    return _short(text, limit)


def _progress_table(progress: Sequence[Mapping[str, Any]]) -> str:
    splits = sorted({str(r["split"]) for r in progress}, key=split_key)
    cells: dict[tuple[int, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for row in progress:
        cells[(int(row["round"]), str(row["family"]))][str(row["split"])] = row
    rows = []
    for (rnd, family), by_split in sorted(cells.items()):
        versions = sorted({str(r.get("policy_version", "")) for r in by_split.values()})
        line: list[Any] = [rnd, family]
        for split in splits:
            r = by_split.get(split)
            line.append("–" if r is None else f"{float(r['success']):.2f} (n={int(r.get('episodes', 0))})")
        line.append(", ".join(versions))
        rows.append(line)
    return _table(
        ["round", "family", *[f"{s} success" for s in splits], "policy version"],
        rows,
        numeric=range(2, 2 + len(splits)),
        cls="progress",
    )


def _policy_table(versions: Sequence[Item]) -> str:
    rows = []
    for v in versions:
        p = v.payload
        digest = str(p.get("checkpoint_sha256") or p.get("checkpoint_hash") or p.get("sha256") or "")
        rows.append(
            [
                v.round,
                p.get("version_id", v.record_id),
                p.get("parent", ""),
                _Raw(f'<code title="{esc(digest)}">{esc(digest[:16])}</code>'),
                _compact(p.get("metrics", {})),
            ]
        )
    return _table(["round", "version", "parent", "checkpoint sha256", "metrics"], rows, cls="policy-versions")


def _diagnosis_table(diagnoses: Sequence[Item], per_round: int = 5) -> str:
    by_round: dict[int, list[Item]] = defaultdict(list)
    for d in diagnoses:
        by_round[d.round].append(d)
    rows = []
    for rnd in sorted(by_round):
        items = by_round[rnd]
        modes = Counter(str(d.payload.get("failure_mode", "")) for d in items)
        for mode, count in sorted(modes.items(), key=lambda kv: (-kv[1], kv[0]))[:per_round]:
            example = next(d for d in items if str(d.payload.get("failure_mode", "")) == mode)
            conditions = ", ".join(
                f"{c.get('key')}={c.get('value')}"
                for c in example.payload.get("conditions", [])
                if c.get("key") not in ("family",)
            )
            rows.append(
                [
                    rnd,
                    mode,
                    count,
                    f"{count / len(items):.0%}",
                    example.payload.get("family", ""),
                    _short(str(example.payload.get("text", ""))),
                    _short(conditions, 160),
                ]
            )
    return _table(
        ["round", "mode", "diagnoses", "share", "family (example)", "example explanation", "example conditions"],
        rows,
        numeric=(2, 3),
        cls="diagnoses",
    )


def _generation_table(programs: Sequence[Item]) -> str:
    rows = []
    for prog in programs:
        p = prog.payload
        allocations = p.get("allocations", [])
        lines = "".join(
            f"<li>{esc(a.get('count', 0))} × {esc(allocation_label(a))} "
            f'<span class="muted">({esc(_short(str(a.get("reason", "")), 160))}; causes: '
            f"{esc(len(a.get('cause_diagnosis_ids', [])))})</span></li>"
            for a in allocations
        )
        rows.append(
            [
                program_round(prog),
                p.get("program_id", prog.record_id),
                p.get("budget", ""),
                _Raw(f"<ul>{lines}</ul>" if lines else "–"),
            ]
        )
    return _table(["for round", "program", "budget", "allocations"], rows, numeric=(2,), cls="generation-programs")


def _potential_table(programs: Sequence[Item]) -> str:
    rows = []
    for prog in programs:
        p = prog.payload
        stages = " → ".join(str(s.get("name", "?")) for s in p.get("stages", []))
        rows.append(
            [
                prog.round,
                p.get("program_id", prog.record_id),
                p.get("family", ""),
                stages,
                p.get("source_diagnosis_id", ""),
                p.get("translator", ""),
                _Raw(f"<pre>{esc(_short(str(p.get('source', '')), 400))}</pre>"),
            ]
        )
    return _table(
        ["written in round", "program", "family", "stages", "from diagnosis", "translator", "source"],
        rows,
        cls="potential-programs",
    )


def _training_table(programs: Sequence[Item]) -> str:
    rows = []
    for prog in programs:
        p = prog.payload
        potentials = "; ".join(
            f"{q.get('family', '?')}: " + " → ".join(str(s.get("name", "?")) for s in q.get("stages", []))
            for q in p.get("potentials", [])
            if isinstance(q, Mapping)
        )
        rows.append(
            [
                program_round(prog),
                p.get("program_id", prog.record_id),
                p.get("sft_epochs", ""),
                p.get("rl_env_steps", ""),
                potentials or "–",
                len(p.get("cause_diagnosis_ids", [])),
                _short(str(p.get("text", "")), 300),
            ]
        )
    return _table(
        ["for round", "program", "SFT epochs", "RL env steps", "potentials", "causes", "explanation"],
        rows,
        numeric=(2, 3, 5),
        cls="training-programs",
    )


def _critic_table(versions: Sequence[Item]) -> str:
    rows = [
        [
            v.round,
            v.payload.get("version_id", v.record_id),
            v.payload.get("backend", ""),
            _compact(v.payload.get("info", {}), 300),
        ]
        for v in versions
    ]
    return _table(["round", "version", "backend", "info"], rows, cls="critic-versions")


def _agreement_table(rounds: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    rows = []
    for rnd, learned in sorted(rounds, key=lambda x: x[0]):
        score, version = learned.get("agreement", {}), str(learned.get("version", ""))
        following = str(learned.get("next_version", version))
        rows.append([rnd, version, score.get("episodes", 0), _rate(score.get("failure_mode")),
                     _rate(score.get("stage")), _rate(score.get("failure")),
                     following + (" (fine-tuned here)" if following != version else "")])
    return _table(["round", "acting version", "episodes", "same failure mode", "same failed stage",
                   "same success verdict", "next version"], rows, numeric=(2, 3, 4, 5), cls="critic-agreement")


def _arms_table(rounds: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    """Episodes and success per round: simulation, real arms together, and each arm (with why it left a batch)."""
    rows = []
    for rnd, done in sorted(rounds, key=lambda x: x[0]):
        sim, real = done["by_source"].get("sim", {}), done["by_source"].get("real", {})
        rows.append([rnd, "simulation", sim.get("episodes", 0), _rate(sim.get("success")), "", ""])
        rows.append([rnd, "real arms", real.get("episodes", 0), _rate(real.get("success")), "", ""])
        notes = done.get("arm_notes", {})
        for robot, row in sorted(done.get("by_robot", {}).items()):
            rows.append([rnd, robot, row["episodes"], _rate(row.get("success")), row.get("unfinished", 0),
                         _short(str(notes.get(robot, "")), 160)])
        for robot, note in sorted(notes.items()):
            if robot not in done.get("by_robot", {}):
                rows.append([rnd, robot, 0, "", 0, _short(str(note), 160)])
    return _table(["round", "source", "episodes", "success", "unfinished", "note"], rows, numeric=(2, 3, 4),
                  cls="sim-vs-real")


def _interventions_table(items: Sequence[Item]) -> str:
    rows = [[i.round, str(i.payload.get("robot_id", "")), str(i.payload.get("kind", "")),
             str(i.payload.get("episode_id", "")), "yes" if i.payload.get("holding") else "no",
             _short(str(i.payload.get("detail", "")), 200)] for i in items]
    return _table(["round", "robot", "kind", "episode", "holding", "detail"], rows, cls="interventions")


def _starts_table(starts: Sequence[Mapping[str, Any]]) -> str:
    from coda_loop.provenance import code_label

    rows = []
    for start in starts:
        packages = start.get("packages") or {}
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(start.get("started", 0))))
        rows.append([start.get("start_id", ""), when, start.get("first_round", ""), code_label(start),
                     start.get("host", ""), start.get("cpus", ""), start.get("torch_cpu_capability", ""),
                     ", ".join(f"{k} {v}" for k, v in packages.items() if v)])
    return _table(["start", "at", "from round", "code", "host", "cpus", "CPU kernels", "packages"], rows,
                  numeric=(0, 2, 5))


def _section(title: str, body: str, empty: bool, what: str) -> str:
    content = f'<p class="muted">No {esc(what)} recorded.</p>' if empty else body
    return f"<h2>{esc(title)}</h2>{content}"


def render(data: ReportData) -> str:
    """Return the whole page as one string."""
    rounds = data.finished_rounds
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>CoDA run report: {esc(data.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>CoDA run report: {esc(data.title)}</h1>",
        f'<p class="muted">Memory: <code>{esc(data.source)}</code> · generated '
        f"{esc(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(data.generated)))} · finished rounds: "
        f"{esc(len(rounds))}" + (f" ({esc(min(rounds))}–{esc(max(rounds))})" if rounds else "") + "</p>",
    ]
    if not rounds:
        parts.append(
            '<div class="notice" id="no-rounds"><strong>No finished rounds.</strong> This run has no '
            "learning progress in its memory yet (no round reached evaluation), so there is nothing to "
            "plot over rounds. The records written so far are counted below.</div>"
        )
    counts = [[kind, n] for kind, n in data.counts.items()]
    parts.append(_table(["record kind", "records"], counts, numeric=(1,), cls="counts"))

    parts.append('<h2>Plots</h2><div class="plots">')
    x_rounds, series = success_by_split(data.progress)
    parts.append(
        line_chart(
            title="Success per round per split",
            x_label="round",
            y_label="success rate",
            x=x_rounds,
            series=series,
            dashed=[s for s in series if s != "id"],
            y_min=0.0,
            y_max=1.0,
        )
    )
    x_rounds, stacks = failure_modes(data.diagnoses)
    parts.append(
        stacked_bar_chart(
            title="Failure modes over rounds",
            x_label="round",
            y_label="failure diagnoses",
            categories=[str(r) for r in x_rounds],
            stacks=stacks,
        )
    )
    x_rounds, stacks = budget_allocation(data.generation_programs)
    parts.append(
        stacked_bar_chart(
            title="Budget allocation over rounds (scenes per family / target)",
            x_label="round the scenes are generated for",
            y_label="scenes",
            categories=[str(r) for r in x_rounds],
            stacks=stacks,
        )
    )
    x_rounds, series = stage_progress(data.episodes)
    parts.append(
        line_chart(
            title="Potential-stage progress (mean stage reached / stages)",
            x_label="round",
            y_label="stage reached / stages",
            x=x_rounds,
            series=series,
            y_min=0.0,
            y_max=1.0,
        )
    )
    parts.append("</div>")

    parts.append(
        _section(
            "Learning progress (round × family × split)",
            _progress_table(data.progress),
            not data.progress,
            "learning progress",
        )
    )
    if data.arms:
        parts.append("<h2>Simulated and real arms, per round</h2>" + _arms_table(data.arms))
    if data.interventions or data.arms:
        parts.append(_section("Safety interventions on real arms", _interventions_table(data.interventions),
                              not data.interventions, "safety interventions"))
    parts.append(
        _section("Policy versions", _policy_table(data.policy_versions), not data.policy_versions, "policy versions")
    )
    parts.append(
        _section(
            "Diagnoses per round (top modes, with an example)",
            _diagnosis_table(data.diagnoses),
            not data.diagnoses,
            "diagnoses",
        )
    )
    parts.append("<h2>Generated programs</h2>")
    parts.append(
        "<h3>Generation programs</h3>"
        + (
            _generation_table(data.generation_programs)
            if data.generation_programs
            else '<p class="muted">No generation programs recorded.</p>'
        )
    )
    parts.append(
        "<h3>Potential programs (Text2potential)</h3>"
        + (
            _potential_table(data.potential_programs)
            if data.potential_programs
            else '<p class="muted">No potential programs recorded.</p>'
        )
    )
    parts.append(
        "<h3>Training programs</h3>"
        + (
            _training_table(data.training_programs)
            if data.training_programs
            else '<p class="muted">No training programs recorded.</p>'
        )
    )
    if data.critic_versions:
        parts.append("<h2>Critic versions</h2>" + _critic_table(data.critic_versions))
    if data.critic_agreement:
        parts.append("<h3>Learned critic against the grounded critic, per round</h3>"
                     + _agreement_table(data.critic_agreement))
    if data.starts:
        parts.append("<h2>Starts of the run (code and machine)</h2>" + _starts_table(data.starts))
    if data.finished_steps:
        steps: dict[int, list[str]] = defaultdict(list)
        for rnd, step in data.finished_steps:
            steps[int(rnd)].append(str(step))
        parts.append(
            "<h2>Finished loop steps</h2>"
            + _table(["round", "steps"], [[r, ", ".join(s)] for r, s in sorted(steps.items())], cls="steps")
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Read ``run_dir/memory.db`` and write the page (default ``run_dir/report.html``); return its path."""
    store = open_store(run_dir)
    try:
        data = collect(store, title=run_dir.resolve().name)
    finally:
        store.close()
    target = out or run_dir / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(target)
    return target
