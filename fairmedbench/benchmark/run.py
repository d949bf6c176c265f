"""`benchmark run`: one RunSpec end to end — dataset split, model, usage, task runner, metrics, results.

Results go to <out>/runs/<model>/<dataset>/<usage>/<run_id>/: one result JSON + predictions Parquet per
seed, then summary.json (written last, so its presence means the run is complete). A complete run is
reused unless forced; seeds already written are reused when an interrupted run is resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from fairmedbench.benchmark.resolve import Resolved, resolve_run
from fairmedbench.engine import store
from fairmedbench.engine.results import RunResult
from fairmedbench.engine.splits import test_fingerprint
from fairmedbench.spec import RunConfig, RunSpec
from fairmedbench.tasks.base import Task

CONFIG_FILE = "config.json"


@dataclass
class RunOptions:
    """Where data, caches and results live and how to compute: none of it changes a number, so none of it is
    in the run's identity (data_root changes the data read, which is: through the data fingerprint)."""

    data_root: str | None = None
    out_root: str = "results"
    cache_dir: str | None = ".fmb-cache"
    device: str = "auto"
    batch_size: int | None = None  # None: engine.device.encoder_batch_size chooses for the device
    num_workers: int | None = None
    channels_last: bool = False
    force: bool = False
    verify_weights: bool = True
    progress: Callable[[str, int, int], None] | None = None
    log: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        """Tell the user (stderr by default)."""
        (self.log or (lambda m: print(m, file=sys.stderr)))(message)


@dataclass
class RunOutcome:
    """A finished run: its config, folder, the per-seed documents, the summary, whether it was reused."""

    config: RunConfig
    out_dir: Path
    seed_docs: list[dict[str, Any]]
    summary: dict[str, Any]
    reused: bool
    results: list[Any] = field(default_factory=list)
    reused_seeds: list[int] = field(default_factory=list)

    @property
    def seeds(self) -> list[RunResult]:
        """The per-seed results, typed."""
        return [RunResult(d, self.out_dir) for d in self.seed_docs]


def is_complete(out_dir: Path, config: RunConfig) -> bool:
    """A finished run of exactly this config: summary.json present and config.json equal to the config."""
    stored = _stored_identity(out_dir)
    return (stored is not None and stored == json.loads(json.dumps(config.identity()))
            and (out_dir / "summary.json").is_file())


def run_dir(config: RunConfig, out_root: str | Path) -> Path:
    """<out_root>/runs/<model>/<dataset>/<usage>/<run id>."""
    return Path(out_root) / "runs" / config.model / config.dataset / config.usage / config.run_id


@contextlib.contextmanager
def run_lock(out_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive lock on the run folder: a second identical run waits for the first, then reuses it."""
    import fcntl

    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process is computing run {out_dir.name}; waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock (also when the process is killed)


def _stored_identity(out_dir: Path) -> dict[str, Any] | None:
    path = out_dir / CONFIG_FILE
    try:
        return store.read_json(path) if path.is_file() else None
    except (OSError, ValueError):  # unreadable: treated as another config (recomputed)
        return None


def run(spec: RunSpec, opts: RunOptions) -> RunOutcome:
    """Run `spec`: everything checked and resolved first, then a complete result with the same stored config is
    reused unless forced, finished seeds are resumed, and everything is saved atomically under a lock."""
    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device, verify_weights=opts.verify_weights)
    config = resolved.config
    out_dir = run_dir(config, opts.out_root)
    with run_lock(out_dir, opts.say):
        store.remove_partial_files(out_dir)  # what a writer killed mid-write left (we hold the lock)
        stored, identity = _stored_identity(out_dir), json.loads(json.dumps(config.identity()))
        if stored is not None and stored != identity:
            opts.say(f"run folder {out_dir} holds another config under the same id; recomputing it")
            opts = _forced(opts)
        if is_complete(out_dir, config) and not opts.force:
            summary = store.read_json(out_dir / "summary.json")
            docs = [store.read_json(out_dir / f"seed{s}.json") for s in config.seeds]
            opts.say(f"reused the finished run {config.run_id} ({out_dir}); --force recomputes it")
            return RunOutcome(config, out_dir, docs, summary, reused=True, reused_seeds=list(config.seeds))
        store.write_json(out_dir / CONFIG_FILE, config.identity())
        return _compute(resolved, opts, out_dir)


def _forced(opts: RunOptions) -> RunOptions:
    from dataclasses import replace

    return replace(opts, force=True)


def _compute(resolved: Resolved, opts: RunOptions, out_dir: Path) -> RunOutcome:
    """Load the model, apply the usage, run the task's runner per seed, write the summary last."""
    from fairmedbench.adapters import RunContext
    from fairmedbench.engine.device import encoder_batch_size
    from fairmedbench.registry.models import load_model, seen_in_pretraining

    config, checked, ds, split = resolved.config, resolved.checked, resolved.dataset, resolved.split
    t0 = time.perf_counter()
    model = load_model(config.model, checked.spec.weights, device=resolved.device, verify=opts.verify_weights)
    info = {
        "dataset": {"name": checked.dataset_card.name, "version": checked.dataset_card.version,
                    "fingerprint": ds.fingerprint, "data_fingerprint": config.data_fingerprint,
                    "split_fingerprint": split.fingerprint, "split_policy": split.policy,
                    "test_fingerprint": test_fingerprint(split.ids["test"]), "n_test": len(split.test),
                    "load_report": store.jsonable(ds.report)},
        "model": {"name": checked.model_card.name, "weights": model.weights.identity,
                  "weights_source": model.weights.source,
                  "seen_in_pretraining": seen_in_pretraining(checked.model_card.name, checked.dataset_card.name)},
        "precision": config.precision,
    }
    t_load = time.perf_counter() - t0
    ctx = RunContext(device=resolved.device, precision=config.precision, cache_dir=opts.cache_dir,
                     batch_size=encoder_batch_size(opts.batch_size, resolved.device),
                     num_workers=opts.num_workers, channels_last=opts.channels_last,
                     dataset_card=checked.dataset_card, hparams=config.hparams, progress=opts.progress)
    runner = checked.task.run()
    docs, results, reused = runner(config, checked.usage, model, ds, split, ctx, opts, out_dir, info, t_load)
    for s in reused:
        opts.say(f"seed {s}: reused its finished result from an earlier, interrupted run")
    summary = _summary(config, checked.task, docs, info, time.perf_counter() - t0)
    store.write_json(out_dir / "summary.json", summary)
    return RunOutcome(config, out_dir, docs, summary, reused=False, results=results, reused_seeds=reused)


def _summary(spec: RunConfig, task: Task, docs: list[dict[str, Any]], info: dict[str, Any],
             seconds: float) -> dict[str, Any]:
    """Across seeds: mean, std and 95% CI of the task's summary metrics per (task column, attribute)."""
    from fairmedbench.metrics.specs import metric_spec
    from fairmedbench.metrics.stats import seed_summary

    kind = docs[0]["kind"]
    results = [RunResult(d, Path()) for d in docs]
    table: dict[str, Any] = {}
    for rep0 in results[0].fairness().reports:
        key = f"{rep0.task}/{rep0.attribute}"
        table[key] = {}
        for m in task.summary_metrics:
            vals = [res.value(m, rep0.attribute, rep0.task) for res in results]
            if all(np.isfinite(vals)):
                s = seed_summary(vals, bounds=metric_spec(m).bounds)
                table[key][m] = {"mean": s.mean, "std": s.std if len(vals) > 1 else None,
                                 "ci_low": s.ci_low if len(vals) > 1 else None,
                                 "ci_high": s.ci_high if len(vals) > 1 else None, "n_seeds": s.n}
    return {"schema_version": store.SCHEMA_VERSION, "kind": f"{kind}-summary", "run_id": spec.run_id,
            "spec": spec.identity(), "inputs": info, "seeds": list(spec.seeds),
            "files": [f"seed{s}.json" for s in spec.seeds], "across_seeds": table, "seconds": seconds}
