"""The nightly's culprit step (culprit_step, called by `nvbench nightly`, issue 70): the alarms that
opened tonight (new or worse) whose cell's counted work changed against the baseline, and the cells whose work gate
broke tonight, are bisected by work between the baseline's commit and tonight's (`nvbench bisect --by work`;
NVBENCH_BISECT=auto also bisects the other alarms by time), within a budget whose estimate is said first; each
culprit goes into the alarm's record (alarms.json), summary.md, RUN/culprits.json and the lines the night ends with.
The night's exit status is never changed by it: a bisect that fails or runs out of budget says so and names the
range still open."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.catalogue import col
from harness.exits import EXIT_BAD_INPUT, EXIT_OK
from harness.results.store import CannotWrite

MODES = ("off", "work", "auto")
DEFAULT_BUDGET_S = 1800.0
FALLBACK_PROCESS_S = 60.0
"""A counted process's seconds where tonight's run recorded none (no counted process tonight)."""


def _git(repo: Path, *args: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _commit(run: Path) -> str | None:
    """A run's recorded commit (full), or None where it was not recorded clean."""
    from harness.analysis.load.runs import load_run

    env = load_run(run).environment
    sha = env.get("nvbench_git_sha")
    return None if not sha or env.get("nvbench_git_dirty") else str(sha)


def _process_s(run: Path) -> float:
    """The longest counted process of tonight's run (its RUN/counted rows), or FALLBACK_PROCESS_S."""
    from harness.results import store, work

    folder = run / work.COUNTED_DIR
    if not (folder / "cells").is_dir():
        return FALLBACK_PROCESS_S
    rows = store.read_cells(folder, [col.duration_s]).to_pylist()
    seconds = [r[col.duration_s] for r in rows if r[col.duration_s]]
    return max(seconds) if seconds else FALLBACK_PROCESS_S


CULPRITS_FILE = "culprits.json"
"""RUN/culprits.json: what the culprit step named tonight, as data (the night's last lines are made from it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A cell the step bisects for: an alarm opened tonight, or a work gate broken tonight."""

    cell_id: str
    axes: tuple[tuple[str, Any], ...]
    what: str
    """The alarm's change (`throughput -20.0% [...]`) or the broken gate, in words."""
    work: Any = None
    """The alarm's AlarmWork: a culprit is its alarm's where their items meet."""


def targets(alarms, mode: str) -> list[Target]:
    """The alarms opened tonight whose work changed (a broken gate's alarm among them), all of them under auto."""
    return [Target(cell_id=a.change.cell_id, axes=a.change.axes, what=a.change.text(), work=a.work) for a in alarms
            if mode == "auto" or (a.work is not None and a.work.state == "changed")]


def only_flags(wanted) -> list[str]:
    """`--only axis=value` for every axis value of the cells (a superset where they differ on several axes: the
    extra cells' counts agree at both ends and decide nothing)."""
    values: dict[str, set[str]] = {}
    for t in wanted:
        for axis, value in (t.axes if isinstance(t, Target) else t.change.axes):
            values.setdefault(axis, set()).add(str(value))
    return [f"--only={axis}={v}" for axis, vs in sorted(values.items()) for v in sorted(vs)]


def culprit_step(argv: list[str]) -> int:
    from harness.analysis.nights import baselines
    from harness.analysis.load.runs import RunInputError
    from harness.results.store import UnreadableFile

    p = argparse.ArgumentParser(prog="nvbench nightly: culprit step")
    p.add_argument("--reports", required=True)
    p.add_argument("--night", required=True, help="tonight's run id")
    p.add_argument("--run", required=True, help="tonight's run folder")
    p.add_argument("--baseline", required=True, help="the baseline (run folder or pointer)")
    p.add_argument("--matrix", required=True)
    p.add_argument("--repo", required=True, help="the git repository of the nights' commits")
    p.add_argument("--mode", choices=MODES, default="work")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    p.add_argument("--summary", action="append", default=[])
    args = p.parse_args(argv)
    reports, run, say = Path(args.reports), Path(args.run), (lambda line: print(f"nightly: {line}", file=sys.stderr))
    try:
        tonight = [a for a in baselines.read_open(reports) if a.since == args.night]
        wanted = targets(tonight, args.mode)
        if args.mode == "off" or not wanted:
            return EXIT_OK
        base, head = _commit(Path(args.baseline)), _commit(run)
    except RunInputError as exc:
        print(f"nightly culprits: {exc.problems[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnreadableFile as exc:
        print(f"nightly culprits: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if base is None or head is None:
        say(f"no bisect: {'the baseline' if base is None else 'tonight'}'s commit is not recorded clean")
        return EXIT_OK
    repo = Path(args.repo)
    count = _git(repo, "rev-list", "--first-parent", "--count", f"{base}..{head}")
    if count is None:
        say(f"no bisect: {base[:12]}..{head[:12]} is not a first-parent range of {repo}")
        return EXIT_OK
    distance = int(count)
    if distance == 0:
        say(f"no bisect: tonight runs the baseline's commit {head[:12]} (the change is not in the code)")
        return EXIT_OK
    if distance == 1:
        found = {_key(t): [_direct(repo, head, t)] for t in wanted}
    else:
        found = _bisect(args, repo, base, head, distance, wanted, run, say)
    if not found:
        return EXIT_OK
    try:
        _record(reports, run, wanted, found, [Path(s) for s in args.summary], args.night)
    except CannotWrite as exc:
        say(f"the culprits could not be recorded: {exc.line()}")
        return EXIT_OK
    say(f"named {sum(map(len, found.values()))} culprit(s) for {len(found)} alarm(s): the night's last lines")
    return EXIT_OK


def culprit_lines(run: Path) -> list[str]:
    """`NEW: <cell> <change>: first bad commit <sha> <subject>: <work line>`, one per culprit the step named tonight
    (RUN/culprits.json): the lines a night that failed on it ends with."""
    from harness.analysis.nights.alarm_work import Culprit

    path = Path(run) / CULPRITS_FILE
    if not path.is_file():
        return []
    return [f"NEW: {t[col.cell_id]} {t['what']}: {Culprit.from_record(c).text()}"
            for t in json.loads(path.read_text())["named"] for c in t["culprits"]]


def _direct(repo: Path, head: str, target: Target):
    from harness.analysis.nights.alarm_work import Culprit

    words = target.work.text() if target.work is not None else target.what
    return Culprit(point=head, subject=_git(repo, "log", "-1", "--format=%s", head) or "", by="range",
                   words=f"{words} (the range is this one commit)")


def _bisect(args, repo: Path, base: str, head: str, distance: int, wanted, run: Path, say) -> dict[str, list]:
    from harness.analysis.nights.alarm_work import Culprit

    cells = len({t.cell_id for t in wanted})  # a cell's alarms share its counted processes
    per = _process_s(run)
    probes = 2 + 2 * math.ceil(math.log2(distance))
    need = probes * cells * per
    by = "work" if args.mode == "work" else "auto"
    say(f"bisecting {base[:12]}..{head[:12]} ({distance} first-parent commits) by {by} for {cells} alarmed cell(s): "
        f"about {probes} counted process(es) a cell, ~{need:.0f} s (a counted process ~{per:.0f} s), budget "
        f"{args.budget_s:.0f} s (NVBENCH_BISECT_BUDGET_S)")
    if need > args.budget_s:
        say(f"no bisect: the budget ({args.budget_s:.0f} s) is too small; it would need ~{need:.0f} s "
            f"(NVBENCH_BISECT_BUDGET_S); the range still open: {base[:12]}..{head[:12]}")
        return {}
    out = run / "bisect"
    argv = [sys.executable, "-m", "harness", "bisect", args.matrix, "--good", base, "--bad", head, "--by", by,
            "--out", str(out), *only_flags(wanted)]
    from harness.orchestrate.session import stopping

    with subprocess.Popen(argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=stopping.die_with_me()) as proc:  # noqa: PLW1509
        try:
            _, err = proc.communicate(timeout=args.budget_s)
        except subprocess.TimeoutExpired:
            stopping.stop_child(proc)
            say(f"the bisect ran out of its budget ({args.budget_s:.0f} s): {_still_open(out, base, head)}")
            return {}
        except BaseException:
            stopping.stop_child(proc)
            raise
    answer = _answer(out)
    if answer is None or answer.get("result") != "found":
        why = (answer or {}).get("text") or (err.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        say(f"the bisect named no commit: {why}")
        return {}
    found: dict[tuple[str, str], list] = {}
    if answer.get("by") == "work":
        for c in answer["culprits"]:
            items = {(i["phase"], i["counter"], i["key"]) for i in c["items"]}
            culprit = Culprit(point=c["point"], subject=c["label"], by="work", words=_words(c))
            for t in wanted:  # an alarm's culprit is the commit of one of its own items
                mine = {i.item for i in t.work.items} if t.work is not None and t.work.state == "changed" else items
                if t.cell_id in c["cells"] and items & mine:
                    found.setdefault(_key(t), []).append(culprit)
    else:
        culprit = Culprit(point=answer["point"], subject=answer.get("label", ""), by="time",
                          words="; ".join(f"{x[col.cell_id]} throughput {x[col.effect_pct]:+.1f}%" for x in answer["cells"]))
        for t in wanted:
            found.setdefault(_key(t), []).append(culprit)
    return found


def _key(t: Target) -> tuple[str, str]:
    """(cell, the alarm's change in words): a cell may hold several alarms tonight (its timing's, each gate's)."""
    return t.cell_id, t.what


def _words(culprit: dict[str, Any]) -> str:
    """A by-work culprit's items in words (from its items, never from its sentence)."""
    from harness.analysis.judge.work_diff import ItemChange, changes_text

    return changes_text([ItemChange(phase=i["phase"], counter=i["counter"], key=i["key"], a=i["good"], b=i["bad"])
                         for i in culprit["items"]])


def _answer(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / "bisect.json").read_text()).get("answer")
    except (OSError, ValueError):
        return None


def _still_open(out: Path, base: str, head: str) -> str:
    return f"the range still open: {base[:12]}..{head[:12]} (nvbench bisect --resume {out} goes on)"


def _record(reports: Path, run: Path, wanted: list[Target], found: dict[str, list], summaries: list[Path],
            night: str) -> None:
    """Each culprit into its alarm's record (alarms.json, no event added), RUN/culprits.json and a section of the
    summaries, written together."""
    from harness.analysis.nights import baselines
    from harness.analysis.pages.wording import esc_md
    from harness.results import store

    open_ = [replace(a, culprits=tuple(found[(a.change.cell_id, a.change.text())]))
             if a.since == night and (a.change.cell_id, a.change.text()) in found else a
             for a in baselines.read_open(reports)]
    named = [{col.cell_id: t.cell_id, "what": t.what, "culprits": [c.to_record() for c in found[_key(t)]]}
             for t in wanted if _key(t) in found]
    files = {baselines.alarms_path(reports): baselines.alarms_bytes(reports, open_, []),
             run / CULPRITS_FILE: (json.dumps({"version": 1, "night": night, "named": named}, indent=2) + "\n").encode()}
    lines = ["", f"### Culprits of {esc_md(night)} (bisected between the baseline's commit and tonight's)", ""]
    lines += [f"- {esc_md(t[col.cell_id])} ({esc_md(t['what'])}): {esc_md(_culprit_words(c))}" for t in named
              for c in t["culprits"]] + [""]
    for summary in summaries:
        if summary.parent.is_dir():
            files[summary] = (summary.read_bytes() if summary.is_file() else b"") + "\n".join(lines).encode()
    store.write_all(files)


def _culprit_words(record: dict[str, Any]) -> str:
    from harness.analysis.nights.alarm_work import Culprit

    c = Culprit.from_record(record)
    return f"{c.text()} (by {c.by})"
