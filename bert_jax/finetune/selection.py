"""BERT's selection protocol: one fine-tuning run per setting of a grid and per seed.

The setting is chosen on validation alone, and test reported for the chosen setting.

    --config.sweep.learning_rate=2e-5,3e-5,5e-5 --config.sweep.num_train_epochs=2,3
    --config.sweep.global_batch_size=16,32 --config.seeds=1,2,3

`run_finetune` is the entry point (`bert-jax finetune`'s, and Python's): a run with neither
a sweep nor seeds goes straight to `job.finetune`.

Each setting runs in DIR/lr2e-05_ep3_bs32/ (only the keys that vary are named), each
seed in its seed_N/ below that (without a grid, DIR/seed_N/). A setting's score is the
mean over seeds of the task's selection metric on its first validation split; ties keep
the earlier setting. DIR/eval_results.json holds every run's validation scores, the
selected setting, and the selected setting's metrics per split (mean and std over
seeds when there are seeds), test included; `best_run` names the run directory whose
model `evaluate`/`predict` on DIR use (the selected setting's best seed).
All runs share one tokenized data set and one compiled train step per batch shape
(`job.Finetuning`).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np

from bert_jax.errors import UserError
from bert_jax.host import folders, outputs, paths
from bert_jax.host.folders import FINETUNING_WORKDIR
from bert_jax.train import multihost
from bert_jax.train.run_config import FINETUNE, SWEEP_KEYS, derive

# config key -> (short name in directory names, the type of its values): the schema's.
GRID = {name: (tag, next(type(k.default) for k in FINETUNE if k.name == name))
        for name, tag in SWEEP_KEYS.items()}


def parse_list(key: str, value: Any, kind: type) -> list:
    """A config value as a list: a number, a tuple or list, or a comma-separated string.

    A string such as "1,2,3"; the config loader may hand over "(1, 2, 3)"."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, str):
        items = [v for v in value.strip("()[] ").replace(" ", "").split(",") if v]
    else:
        items = [value]
    try:
        numbers = [float(v) for v in items]
    except (TypeError, ValueError):
        raise UserError(f"{key} must be a number or a comma-separated list of numbers, "
                        f"got {value!r}") from None
    if any(isinstance(v, bool) for v in items) or (kind is int and not all(
            n.is_integer() for n in numbers)):
        raise UserError(f"{key} must hold {kind.__name__}s, got {value!r}")
    out = [kind(n) for n in numbers]
    if len(set(out)) != len(out):
        raise UserError(f"{key} lists a value twice: {value!r}")
    return out


def swept(config, key: str):
    """`sweep.KEY` of `config`, "" when not set."""
    return config.sweep[key]


def is_sweep(config) -> bool:
    """Whether `config` asks for more than one run: a `sweep.*` list or `seeds`."""
    return bool(config.seeds) or any(swept(config, key) for key in GRID)


def grid_of(config) -> dict[str, list]:
    """{key: values} of the grid: `sweep.KEY` where set, else the key's own value."""
    return {key: parse_list(f"sweep.{key}", swept(config, key), kind) if swept(config, key)
            else [config[key]] for key, (_, kind) in GRID.items()}


def setting_config(config, setting: dict):
    """A copy of `config` for one run: the setting's values (checked), no lists."""
    return derive(config, **setting, sweep=dict.fromkeys(GRID, ""), seeds="")


def setting_name(setting: dict, grid: dict) -> str:
    return "_".join(f"{GRID[k][0]}{v:g}" for k, v in setting.items() if len(grid[k]) > 1)


def mean_std(runs: list[dict]) -> dict[str, dict]:
    """{split: {metric: {mean, std}}} over runs (population std), for every split."""
    splits = [k for k, v in runs[0].items() if isinstance(v, dict)]
    return {split: {name: {"mean": float(np.mean([r[split][name] for r in runs])),
                           "std": float(np.std([r[split][name] for r in runs]))}
                    for name in runs[0][split]} for split in splits}


def score(run: dict) -> float:
    return run[run["selection_split"]][run["selection_metric"]]


def summarize_seeds(runs: dict[int, dict]) -> dict:
    """Mean and std of every metric per split over seeds, and the best seed.

    The best seed has the best selection metric on the selection split; ties keep the earlier
    seed."""
    best_seed = max(runs, key=lambda s: score(runs[s]))
    return {"seeds": list(runs), "runs": runs, "best_seed": best_seed,
            "best_run": FINETUNING_WORKDIR.seed_dir(best_seed), **mean_std(list(runs.values()))}


def run_finetune(config, workdir: str) -> dict:
    """One run, or with `seeds` or a `sweep.*` list BERT's selection over them (`run_grid`).

    Returns what eval_results.json holds. Refuses a workdir of another kind, or its own
    --init_from."""
    from bert_jax.finetune import job
    outputs.check_workdir(workdir, folders.FINETUNING,
                          {"--init_from": config.init_from, "--config.model": config.model})
    if is_sweep(config):
        return run_grid(config, workdir)
    return job.finetune(config, workdir)


def run_grid(config, workdir: str) -> dict:
    """All runs of the grid and seeds; returns (and writes) the summary."""
    from bert_jax.finetune import job
    grid = grid_of(config)
    seeds = parse_list("seeds", config.seeds, int) if config.seeds else []
    settings = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    session, summaries = None, []
    for setting in settings:
        one = setting_config(config, setting)
        session = session or job.Finetuning(one)
        name = setting_name(setting, grid)
        setting_dir = paths.join(workdir, name) if name else workdir
        if not seeds:
            result = session.run(one, setting_dir)
            summaries.append({**setting, "run_dir": name, "best_run": name, "score": score(result),
                              "result": result})
            continue
        runs = {}
        for seed in seeds:
            runs[seed] = session.run(derive(one, seed=seed),
                                     paths.join(setting_dir, FINETUNING_WORKDIR.seed_dir(seed)))
        seeds_summary = summarize_seeds(runs)
        summaries.append({**setting, "run_dir": name,
                          "best_run": paths.join(name, seeds_summary["best_run"]),
                          "score": float(np.mean([score(r) for r in runs.values()])),
                          "result": seeds_summary})
        if name and multihost.is_primary():
            _write(setting_dir, seeds_summary)
    summary = _summary(summaries, grid, seeds)
    if multihost.is_primary():
        _write(workdir, summary)
    _print(summary)
    return summary


def _summary(summaries: list[dict], grid: dict, seeds: list[int]) -> dict:
    selected = max(summaries, key=lambda s: s["score"])  # max keeps the first of ties
    first = selected["result"]["runs"] if seeds else {None: selected["result"]}
    run = next(iter(first.values()))
    per_split = {k: v for k, v in selected["result"].items()
                 if k not in ("runs", "seeds", "best_seed", "best_run")}
    if not seeds:
        per_split = {k: v for k, v in per_split.items() if isinstance(v, dict)}
    summary = {"task": run["task"], "selection_split": run["selection_split"],
               "selection_metric": run["selection_metric"], "seeds": seeds,
               "grid": grid, "selected": {k: selected[k] for k in grid},
               "best_run": selected["best_run"], **per_split}
    if seeds:
        summary.update(best_seed=selected["result"]["best_seed"],
                       runs=selected["result"]["runs"])
    summary["settings"] = [
        {**{k: s[k] for k in grid}, "run_dir": s["run_dir"], "score": s["score"],
         "validation": ({seed: r[r["selection_split"]] for seed, r in s["result"]["runs"].items()}
                        if seeds else s["result"][run["selection_split"]])}
        for s in summaries]
    return summary


def _write(workdir: str, summary: dict) -> None:
    paths.makedirs(workdir)
    paths.write_text(paths.join(workdir, FINETUNING_WORKDIR.results),
                     json.dumps(summary, indent=2))


def _print(summary: dict) -> None:
    metric = f"{summary['selection_split']} {summary['selection_metric']}"
    if len(summary["settings"]) > 1:
        for s in summary["settings"]:
            mark = "*" if {k: s[k] for k in summary["grid"]} == summary["selected"] else " "
            print(f"{mark} {s['run_dir']}: {metric} {s['score']:.4f}")
    for split, values in summary.items():
        if isinstance(values, dict) and split not in ("grid", "selected", "runs"):
            line = ", ".join(f"{k} {v['mean']:.4f} +- {v['std']:.4f}" if isinstance(v, dict)
                             else f"{k} {v:.4f}" for k, v in values.items()
                             if isinstance(v, (dict, float, int)))
            print(f"{split} (selected {summary['selected']}): {line}")
