"""`sharp ship`: copy a compiled program into the package (program/compiled/) as a default, with its manifest.

The copy is the saved program's JSON (no pickle) with machine-specific paths removed from its ``meta``; the
manifest entry (program/serving/shipped.py) says what it was compiled on (dataset, corpus sha256, the model), the
commands that made it, and the figures measured for it, so a fresh checkout can tell what it runs by default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from program.digest import digest
from program.errors import ProgramFileError, SharpError
from program.serving import shipped
from program.serving.saved import read_program

# meta keys that name things on the machine that compiled the program, not what it is (its MLflow run is in that
# machine's store): a program rebuilt from the same recording ships byte for byte the same
MACHINE_KEYS = ("index_dir", "storage", "run_id")


def ship_program(
    source: Path,
    name: str,
    *,
    commands: Sequence[str] = (),
    figures: Mapping[str, Any] | None = None,
    folder: Path | None = None,
) -> Path:
    """Copy ``source`` to ``folder/NAME.json`` and record it in the folder's manifest; return the copy."""
    folder = folder or shipped.COMPILED_DIR
    saved = read_program(source)  # refuses a tampered file or one from another code version
    corpus = saved.index_manifest.get("corpus_sha256")
    if not corpus:
        raise ProgramFileError(f"{source} records no index corpus: recompile it against an index before shipping")
    lm = (saved.lm.get("default") or {}).get("model")
    roles = {r: (saved.lm.get(r) or {}).get("model", lm) for r in ("planner", "critic", "generator")}
    if None in roles.values():
        raise ProgramFileError(f"{source} records no model for {sorted(r for r, m in roles.items() if m is None)}")
    if len(set(roles.values())) != 1:
        raise ProgramFileError(f"{source} uses several models ({roles}); a shipped default is for one model")
    body = json.loads(Path(source).read_text())
    body.pop("sha256", None)
    body["meta"] = {k: v for k, v in body.get("meta", {}).items() if k not in MACHINE_KEYS}
    body["sha256"] = digest(body)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.json"
    out.write_text(json.dumps(body, indent=2, default=str) + "\n")
    entry = shipped.manifest_entry(
        out,
        {
            "system": saved.system,
            "dataset": saved.meta.get("dataset"),
            "corpus_sha256": corpus,
            "lm": next(iter(roles.values())),
            "compiled_on": _compiled_on(saved.meta, saved.config),
            "commands": list(commands),
            "figures": dict(figures or {}),
        },
    )
    manifest = {"programs": {**shipped.read_manifest(folder), name: entry}}
    (folder / shipped.MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out


def _compiled_on(meta: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    gate = (config.get("gate") or {}).get("fitted_on") or {}
    parts = [f"{meta.get('dataset', '?')} train"]
    offset, n = gate.get("train_offset"), gate.get("n_train")
    if offset is not None and n is not None:  # the seeded positions the gate was fitted on
        parts.append(f"seeded questions {offset}-{offset + n - 1}")
        if gate.get("n_heldout"):
            parts.append(f"{offset + n}-{offset + n + gate['n_heldout'] - 1} held out")
    elif offset:
        parts.append(f"after the first {offset} seeded questions")
    return ", ".join(parts)


# ---- the check before a program replaces a shipped one ----------------------------------------------------
class ShipRefusedError(SharpError):
    """The program to ship scores below the shipped one it would replace, on the same held-out questions."""


def score_on(runtime: Any, module: Any, examples: Sequence[Any], where: Path) -> Any:
    """``module``'s scores on ``examples``, replayed over the recording at ``where`` (its rounds recorded where
    it lacks them: a live LM cost, logged)."""
    from optimize import recording, replay

    cfg = module.config
    # the rounds this program's policy can reach, no others: the repairs it names (none when it never
    # repairs), focused reads where its own rule asks for them
    records = recording.record(
        module,
        examples,
        where,
        critique=False,
        passages=runtime.passages(),
        actions=cfg.reachable_repairs(),
        focus_when=cfg.focus_when,
    )
    # only the rounds it reaches: a build's recording also holds rounds of repairs this program never runs (a chain
    # recorded by the program being built, read with its own hop planner), which it need not read alike
    recording.check_reading(records.values(), module, ("draft", *cfg.reachable_repairs()))
    return replay.score(records, examples, module.config, passages=runtime.passages())


def ship_check(
    runtime: Any,
    new: Path,
    current: Path,
    examples: Sequence[Any],
    recorded: Path | None = None,
    seed: int = 0,
    groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """EM of the program at ``new`` and of the shipped ``current`` on the same held-out ``examples``, each
    replayed over a recording of its own reading (``recorded`` for the new one; for the other, ``recorded`` too
    where it reads alike, else a workspace file named by what its rounds read), with the paired bootstrap CI of
    the difference. ``groups`` (question id -> group, e.g. its form) adds the same comparison per group under
    ``"by group"``."""
    from optimize import recording
    from optimize.stats import paired_bootstrap

    out: dict[str, Any] = {"questions": len(examples)}
    rows = {}
    first = None
    for label, path, given in (("new", new, recorded), ("shipped", current, None)):
        module, _ = runtime.load_program(path)
        if given is None and recorded is not None and first is not None and _reads_alike(module, first):
            given = recorded  # the shipped program reads as the new one: its rounds are the same recording's
        first = first or module
        where = given or runtime.workspace / "recordings" / f"ship-{recording.reading_key(module, examples)}.jsonl"
        result = score_on(runtime, module, examples, Path(where))
        rows[label] = {r["id"]: float(r["em"]) for r in result.rows}
        out[label] = {"em": round(result.metrics["em"], 4), "lm_calls_per_q": round(result.metrics["lm_calls_per_q"], 3),
                      "recording": kept_path(Path(where))}  # fmt: skip
    diff = paired_bootstrap(rows["new"], rows["shipped"], seed=seed)
    out["delta_em"] = round(diff["diff"], 4) if diff else out["new"]["em"] - out["shipped"]["em"]
    out["ci"] = [round(diff["ci"][0], 4), round(diff["ci"][1], 4)] if diff else None
    if groups is not None:
        out["by group"] = {}
        for group in sorted(set(groups.values())):
            ids = [i for i in rows["new"] if groups.get(i) == group]
            em = {label: {i: r[i] for i in ids} for label, r in rows.items()}
            d = paired_bootstrap(em["new"], em["shipped"], seed=seed)
            out["by group"][group] = {
                "questions": len(ids),
                **{f"em {label}": round(sum(v.values()) / len(ids), 3) for label, v in em.items()},
                "delta_em": [round(d["diff"], 3), round(d["ci"][0], 3), round(d["ci"][1], 3)] if d else None,
            }
    return out


def kept_path(path: Path) -> str:
    """A path as a committed file keeps it: relative to the working directory where it lies below it, so that
    MANIFEST.json names no machine's folders."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _reads_alike(module: Any, other: Any) -> bool:
    """Whether ``module`` reads every round it can reach as ``other`` does (the same prompts, demos and reading
    settings): then one recording serves both."""
    from optimize import recording

    mine, theirs = recording.readings(module), recording.readings(other)
    return all(mine[a] == theirs[a] for a in ("draft", *module.config.reachable_repairs()))


def refuse_if_worse(check: Mapping[str, Any], name: str, force: bool) -> None:
    """Raise ShipRefusedError when the new program scores below the shipped one (unless ``force``)."""
    if check["delta_em"] < 0 and not force:
        raise ShipRefusedError(
            f"{name}: the new program scores {check['new']['em']:.3f} EM on {check['questions']} held-out train "
            f"questions, {-check['delta_em']:.3f} below the shipped one's {check['shipped']['em']:.3f} (95% CI "
            f"of the difference {check['ci']}); ship it anyway with --force"
        )
