"""`benchmark sweep STUDY`: a study's cells resolved to run configs, deduplicated against the store, and
scheduled on a local launcher (in-process, or a process pool) or on Ray; resumable.

Feature extraction is its own task: one ENCODE per distinct (model, weights, dataset + options, split,
precision, slice policy) among the runs whose usage reads cached features (`Usage.caches_features`); it
fills the feature cache exactly as the runs would, so every run of that pair reads it; the runs depend on it.
Each run task calls `benchmark.run.run`, whose run folder is written under a lock with atomic writes,
summary.json last: a rerun after a kill (driver or worker) finds finished runs complete and recomputes only
the others, with no partial or duplicate result.

Study state, under `<out>/studies/<study name>/` (written atomically):

  plan.json  {"study": name, "source": path of the YAML, "study_sha256": sha256 of its text,
              "cells": [{"cell": {model, dataset, usage, mitigation, prompt, attributes, seeds, hparams,
                                  train_group_share, share_group, train_size, prevalence, prevalence_on},
                         "run_id": str | null, "run_dir": str | null (relative to --out), "encode": key | null,
                         "status": "planned" | "done" | "failed" | "skipped",
                         "reason": str | null (why skipped, or why it could not be resolved),
                         "error": str | null (why it failed)}]}
             rewritten when the sweep starts (done = a complete result is in the store) and when it ends.
  state/<run_id>.json and state/encode-<key>.json  one journal per task:
             {"task": run id or encode key, "kind": "run" | "encode", "status": "running" | "done" | "failed",
              "host", "pid", "start", "end" (unix seconds), "error": str | null, "traceback": str | null
              (its last 4000 characters), "reused": bool}
             A "running" entry whose process is gone (same host, dead pid) is stale: the task was killed.

A done run's results are `<out>/<run_dir>/summary.json` and `seed<N>.json` (+ predictions Parquet).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.benchmark.studies import Cell, Study, group_reasons, runnable
from fairmedbench.engine import store
from fairmedbench.engine.hparams import check_cost_bounds, cost_values, over_cost_bounds
from fairmedbench.errors import FMBError, InputError, MissingResourceError
from fairmedbench.spec import RunOptions, option

if TYPE_CHECKING:
    from fairmedbench.benchmark.resolve import Resolved
    from fairmedbench.report.study import StudyReport
    from fairmedbench.spec import RunConfig, RunSpec

LAUNCHERS = ("local", "ray")
# RunOptions fields a task receives (plain values: they travel to process-pool and Ray workers)
_OPTION_FIELDS = ("data_root", "out_root", "cache_dir", "device", "batch_size", "num_workers", "channels_last",
                  "force", "verify_weights", "i_know")


@dataclass(frozen=True)
class SweepOptions:
    """`benchmark sweep`'s options (where and how: RunOptions)."""

    study: str = field(metadata=option("a shipped study's name or a study YAML file", flag="study"))
    launcher: str = field(default="local", metadata=option(
        "local: in this process (or a process pool with --max-parallel); ray: Ray tasks", choices=list(LAUNCHERS)))
    address: str | None = field(default=None, metadata=option(
        "an existing Ray cluster (HOST:PORT or ray://HOST:PORT); default: a local one"))
    max_parallel: int | None = field(default=None, metadata=option(
        "tasks at once (local pool size; Ray: CPUs of a local cluster)", type=int))
    dry_run: bool = field(default=False, metadata=option(
        "print the plan (runs, encodes, skipped cells with reasons, a measured cost estimate)"))
    status: bool = field(default=False, metadata=option("show done / running / failed / skipped cells"))


@dataclass(frozen=True)
class StudyReportOptions:
    """`benchmark study report`'s options."""

    study: str = field(metadata=option(
        "a shipped study's name or a study YAML file (as given to benchmark sweep)", flag="study"))
    out: str = field(default=RunOptions.out_root, metadata=option("the results folder the sweep wrote into"))
    dest: str | None = field(default=None, metadata=option("report folder (default: <out>/studies/<name>/report)"))
    evidence: str | None = field(default=None, metadata=option(
        "write an evidence pack of the study report (page, tidy table, figures, plan, every run's results and "
        "predictions, command, environment, summary.md/.html with the Art. 10/13/14/15/72 and FDA mapping, "
        "MANIFEST.sha256); DIR must be new, empty, or an earlier pack (replaced with --force)", metavar="DIR"))
    force: bool = field(default=False, metadata=option("with --evidence: replace the earlier pack in DIR (only the "
                                                       "files its MANIFEST.sha256 lists)"))
    sign_key: str | None = field(default=None, metadata=option(
        "with --evidence: sign MANIFEST.sha256 into MANIFEST.sig with hmac:FILE or ed25519:FILE; default: "
        "$FMB_SIGN_KEY", metavar="KEY"))


@dataclass
class PlannedCell:
    """A cell of the study with what the sweep knows of it."""

    cell: Cell
    run_id: str | None = None
    run_dir: str | None = None
    encode: str | None = None
    status: str = "planned"
    reason: str | None = None
    error: str | None = None
    resolved: Resolved | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"cell": self.cell.fields, "run_id": self.run_id, "run_dir": self.run_dir, "encode": self.encode,
                "status": self.status, "reason": self.reason, "error": self.error}


@dataclass
class EncodeTask:
    """One feature extraction shared by the runs of one (model, weights, dataset, split, precision)."""

    key: str
    spec: RunSpec  # the RunSpec of the first run needing it
    resolved: Resolved
    runs: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """A study expanded and resolved: its cells, the runs to compute (unique run ids) and the encodes."""

    study: Study
    cells: list[PlannedCell]
    runs: dict[str, PlannedCell]  # run id -> the first cell with it, still to compute
    encodes: dict[str, EncodeTask]

    @property
    def skipped(self) -> list[PlannedCell]:
        return [c for c in self.cells if c.status == "skipped"]

    def to_dict(self) -> dict[str, Any]:
        return {"study": self.study.name, "source": self.study.source, "study_sha256": self.study.sha256,
                "cells": [c.to_dict() for c in self.cells]}


def study_dir(out_root: str | Path, name: str) -> Path:
    """<out>/studies/<name>."""
    return Path(out_root) / "studies" / name


def study_report(given: str, out_root: str, dest: str | None = None) -> StudyReport:
    """`benchmark study report`: the study `given` (a shipped name or a file) aggregated from the plan and runs a
    sweep wrote under `out_root` into `dest` (default <out>/studies/<name>/report); returns the StudyReport."""
    from fairmedbench.benchmark.studies import load_study
    from fairmedbench.report.study import write_study_report

    study = load_study(given)
    folder = study_dir(out_root, study.name)
    plan = folder / "plan.json"
    if not plan.is_file():
        raise MissingResourceError(f"no plan for study {study.name!r} under {out_root}: run benchmark sweep "
                                   f"{given} --out {out_root} first")
    return write_study_report(plan, Path(out_root), Path(dest) if dest else folder / "report")


def encode_key(config: RunConfig) -> str:
    """What one feature extraction depends on: model, weights, dataset (+ options, data and split fingerprints),
    precision and, on volumes, the slice policy (sampling fields are not in it: sampling follows extraction)."""
    parts = {k: config.identity()[k] for k in ("model", "weights", "dataset", "dataset_version", "data_fingerprint",
                                               "dataset_options", "skip_bad", "split_fingerprint", "precision")}
    parts["slices"] = config.usage_hparams.get("slices")
    if config.eval_datasets:  # their test splits are encoded with the run's
        parts["eval_datasets"] = [e["data_fingerprint"] + e["split_fingerprint"] for e in config.eval_datasets]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_plan(study: Study, opts: RunOptions, *, progress: Callable[[str, int, int], None] | None = None) -> Plan:
    """Expand `study`, resolve every runnable cell to its RunConfig (no weights loaded, no features extracted),
    mark the runs whose complete result is in the store as done, and group the rest's encodes; `progress`
    reports the cells resolved."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.benchmark.resolve import resolve_run
    from fairmedbench.benchmark.run import is_complete, run_dir

    planned = [PlannedCell(cell, status="planned" if cell.runnable else "skipped", reason=cell.reason)
               for cell in runnable(study)]
    runs: dict[str, PlannedCell] = {}
    encodes: dict[str, EncodeTask] = {}
    unresolvable: dict[tuple, str] = {}  # (model, weights, dataset, options, split): why it cannot resolve
    for i, p in enumerate(planned):
        if progress is not None:
            progress(f"plan study {study.name}: cells resolved", i, len(planned))
        if p.status == "skipped":
            continue
        spec = p.cell.spec
        pair = (spec.model, spec.weights, spec.dataset, json.dumps(spec.dataset_options, sort_keys=True, default=str),
                spec.split_seed, spec.split_file)
        if pair in unresolvable:  # data or weights absent: the same answer for every cell of the pair
            p.reason = unresolvable[pair]
            continue
        try:
            resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device,
                                   verify_weights=opts.verify_weights)
        except MissingResourceError as exc:
            p.reason = unresolvable[pair] = f"cannot resolve: {exc}{_data_note(spec, opts, str(exc))}"
            continue
        except FMBError as exc:
            p.reason = f"cannot resolve: {exc}"
            continue
        config = resolved.config
        folder = run_dir(config, opts.out_root)
        p.run_id, p.run_dir = config.run_id, str(folder.relative_to(opts.out_root))
        if not opts.force and is_complete(folder, config):
            p.status = "done"
            continue
        if config.run_id in runs:  # another cell resolved to the same config (e.g. usage auto and its choice)
            p.encode = runs[config.run_id].encode
            continue
        p.resolved = resolved
        runs[config.run_id] = p
        if USAGES.get(config.usage).caches_features:
            key = encode_key(config)
            p.encode = key
            task = encodes.setdefault(key, EncodeTask(key, p.cell.spec, resolved))
            task.runs.append(config.run_id)
    if progress is not None:
        progress(f"plan study {study.name}: cells resolved", len(planned), len(planned))
    return Plan(study, planned, runs, encodes)


def estimated_time(plan: Plan, opts: RunOptions, progress: Callable[[str, int, int], None] | None = None) -> str:
    """The plan's cost in words (`costs.estimate`: encodes, training, bootstrap and permutation tests)."""
    from fairmedbench.benchmark.costs import duration, estimate

    est = estimate(plan, opts.device, plan.study.precision, progress=progress)
    t, r, c = est["totals"], est["resampling"], est["counted"]
    assumed = f" ({c['assumed']} of them costed at an assumed size: their data is absent)" if c["assumed"] else ""
    unknown = f"; {c['unknown']} more of unknown cost" if c["unknown"] else ""
    return (f"about {duration(t['measured'] + t['assumed'])} for {c['measured'] + c['assumed']} runs{assumed}, of "
            f"which {duration(r['measured'] + r['assumed'])} are bootstrap and permutation tests "
            f"({plan.study.n_boot} resamples and {plan.study.n_perm} permutations per task-attribute pair and seed, "
            f"at {est['resample_rate']['how']}){unknown}; --dry-run shows each rate")


def _data_note(spec: RunSpec, opts: RunOptions, message: str) -> str:
    """When the weights were missing (resolved first), whether the dataset's data is absent too."""
    from fairmedbench.registry.datasets import get_card

    card = get_card(spec.dataset)
    if card.synthetic or f"dataset {card.name!r}" in message:
        return ""
    present = [where for where, path in card.root_candidates(opts.data_root) if path.exists()]
    return "" if present else f"; data absent too (pass --data-root or set {card.env_var} or FMB_DATA_ROOT)"


# -------------------------------------------------------------------------------------------------- the tasks

def _journal(state: Path, name: str, doc: dict[str, Any]) -> None:
    store.write_json(state / f"{name}.json", doc)


def execute_task(kind: str, spec: RunSpec, options: dict[str, Any], state: str, name: str) -> dict[str, Any]:
    """Run one task (an encode or a run) and journal it; never raises: a failure is returned and journaled."""
    from fairmedbench.spec import RunOptions

    state_dir = Path(state)
    doc = {"task": name, "kind": kind, "status": "running", "host": platform.node(), "pid": os.getpid(),
           "start": time.time(), "end": None, "error": None, "traceback": None, "reused": False}
    _journal(state_dir, name if kind == "run" else f"encode-{name}", doc)
    opts = RunOptions(**options, log=lambda message: None)
    try:
        if kind == "encode":
            encode(spec, opts)
        else:
            from fairmedbench.benchmark.run import run

            doc["reused"] = run(spec, opts).reused
        doc["status"] = "done"
    except Exception as exc:  # a failed task is recorded and the study goes on
        doc.update(status="failed", error=f"{type(exc).__name__}: {exc}" if not isinstance(exc, FMBError) else str(exc),
                   traceback=traceback.format_exc()[-4000:])
    doc["end"] = time.time()
    _journal(state_dir, name if kind == "run" else f"encode-{name}", doc)
    return doc


def encode(spec: RunSpec, opts: RunOptions) -> None:
    """Fill the feature cache for `spec`'s model and dataset exactly as its run will read it (same views, same
    context), without training anything."""
    from fairmedbench.adapters import RunContext
    from fairmedbench.benchmark.resolve import resolve_run
    from fairmedbench.engine.device import encoder_batch_size
    from fairmedbench.registry.models import load_model
    from fairmedbench.tasks.common import prepare_inputs

    resolved = resolve_run(spec, data_root=opts.data_root, device=opts.device, verify_weights=opts.verify_weights)
    config, ds, split = resolved.config, resolved.dataset, resolved.split
    model = load_model(config.model, spec.weights, device=resolved.device, verify=opts.verify_weights)
    ctx = RunContext(device=resolved.device, precision=config.precision, cache_dir=opts.cache_dir,
                     batch_size=encoder_batch_size(opts.batch_size, resolved.device),
                     num_workers=opts.num_workers, channels_last=opts.channels_last,
                     dataset_card=resolved.checked.dataset_card, hparams=config.hparams, progress=opts.progress)
    prepare_inputs(resolved.checked.usage, model, ds, split, ctx, resolved.externals)


# ------------------------------------------------------------------------------------------------- launchers

@dataclass
class SweepResult:
    """What a sweep did: tasks by kind and status, and the plan with every cell's final status."""

    plan: Plan
    encodes: int = 0
    ran: int = 0
    reused: int = 0
    failed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No task and no cell failed."""
        return not self.failed and not any(c.status == "failed" for c in self.plan.cells)


def sweep(study: Study, opts: RunOptions, *, launcher: str = "local", address: str | None = None,
          max_parallel: int | None = None, report: Callable[[str], None] | None = None,
          progress: Callable[[str, int, int], None] | None = None) -> SweepResult:
    """Plan `study`, then compute its encodes and missing runs on `launcher`; every cell's outcome is written
    to the study's plan.json and each task's journal. Failures are recorded, never raised."""
    if launcher not in LAUNCHERS:
        raise InputError(f"--launcher {launcher!r}: choose {' or '.join(LAUNCHERS)}")
    if max_parallel is not None and max_parallel < 1:
        raise InputError(f"--max-parallel {max_parallel}: must be >= 1")
    if address and launcher != "ray":
        raise InputError("--address names a Ray cluster: use it with --launcher ray")
    if address:
        check_address(address)  # before planning: an unreachable cluster is reported at once
    say = report or (lambda m: print(m, file=sys.stderr))
    plan = make_plan(study, opts, progress=progress)
    if plan.runs:  # finished runs are reused whatever their cost (as `benchmark run` does)
        check_cost_bounds(cost_values(study), opts.i_know, lambda: estimated_time(plan, opts, progress), say)
    folder = study_dir(opts.out_root, study.name)
    state = folder / "state"
    store.write_json(folder / "plan.json", plan.to_dict())
    for p in plan.cells:  # cells that could not be resolved (data or weights absent) fail now, with that reason
        if p.status == "planned" and p.run_id is None:
            p.status, p.error = "failed", p.reason
    result = SweepResult(plan)
    options = {k: getattr(opts, k) for k in _OPTION_FIELDS}
    encode_tasks = [("encode", t.spec, t.key) for t in plan.encodes.values()]
    run_tasks = [("run", p.cell.spec, rid, p.encode) for rid, p in plan.runs.items()]
    total = len(encode_tasks) + len(run_tasks)
    counter = {"done": 0}

    def finished(doc: dict[str, Any]) -> None:
        counter["done"] += 1
        if progress is not None:
            progress(f"study {study.name}", counter["done"], total)
        seconds = (doc["end"] or 0) - doc["start"]
        if doc["kind"] == "encode":
            result.encodes += 1
            what = f"encode {plan.encodes[doc['task']].resolved.config.model}/" \
                   f"{plan.encodes[doc['task']].resolved.config.dataset}"
        else:
            cell = plan.runs[doc["task"]].cell.fields
            what = f"run {doc['task']} {cell['model']}/{cell['dataset']}/{cell['usage']}/{cell['mitigation']}"
            if doc["status"] == "done":
                result.reused += bool(doc.get("reused"))
                result.ran += not doc.get("reused")
        if doc["status"] == "failed":
            result.failed.append(doc["task"])
        say(f"[{counter['done']}/{total}] {doc['status']}: {what} ({seconds:.1f}s)"
            + (f": {doc['error']}" if doc["status"] == "failed" else ""))

    if progress is not None and total:
        progress(f"study {study.name}", 0, total)
    runner = _run_local if launcher == "local" else _run_ray
    outcomes = runner(encode_tasks, run_tasks, options, str(state), finished, max_parallel=max_parallel,
                      address=address)
    failed_encodes = {t[2]: outcomes[t[2]] for t in encode_tasks if outcomes.get(t[2], {}).get("status") == "failed"}
    for p in plan.cells:
        if p.run_id is None or p.status != "planned":
            continue
        doc = outcomes.get(p.run_id)
        if doc is None and p.encode in failed_encodes:
            p.status, p.error = "failed", f"its feature extraction failed: {failed_encodes[p.encode]['error']}"
        elif doc is not None:
            p.status, p.error = doc["status"], doc["error"]
    store.write_json(folder / "plan.json", plan.to_dict())
    return result


def _run_local(encodes: list[tuple], runs: list[tuple], options: dict[str, Any], state: str,
               finished: Callable[[dict], None], *, max_parallel: int | None, address: str | None) -> dict[str, dict]:
    """In-process and sequential (max_parallel 1 or None), else a spawned process pool: encodes, then runs
    (a run whose encode failed is not started)."""
    outcomes: dict[str, dict] = {}
    if not max_parallel or max_parallel == 1:
        for kind, spec, name, *_ in encodes:
            outcomes[name] = doc = execute_task(kind, spec, options, state, name)
            finished(doc)
        for kind, spec, name, enc in runs:
            if enc is not None and outcomes.get(enc, {}).get("status") == "failed":
                continue
            outcomes[name] = doc = execute_task(kind, spec, options, state, name)
            finished(doc)
        return outcomes
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=max_parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        for batch in (encodes, runs):
            futures = {}
            for kind, spec, name, *rest in batch:
                if rest and rest[0] is not None and outcomes.get(rest[0], {}).get("status") == "failed":
                    continue
                futures[pool.submit(execute_task, kind, spec, options, state, name)] = (kind, name)
            for fut in as_completed(futures):
                try:
                    doc = fut.result()
                except Exception as exc:  # a worker process died (killed, out of memory): the pool is broken
                    kind, name = futures[fut]
                    doc = _died(kind, name, exc)
                outcomes[doc["task"]] = doc
                finished(doc)
    return outcomes


def _died(kind: str, name: str, exc: BaseException) -> dict[str, Any]:
    """The outcome of a task whose worker process died before it could journal one (rerun to finish it)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return {"task": name, "kind": kind, "status": "failed", "error": f"worker died: {type(exc).__name__}: {first}",
            "start": time.time(), "end": time.time()}


def ray_start(address: str | None, max_parallel: int | None) -> bool:
    """Join the Ray cluster at `address`, or start a local one with `max_parallel` CPUs (default: all), unless Ray
    is already up; its workers import this very checkout and $PYTHONPATH (an installed copy elsewhere on the
    cluster's path would differ) with the driver's kernel variables. True when started here (the caller shuts it
    down)."""
    import ray

    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = {"env_vars": worker_environment(path)}
    if ray.is_initialized():
        return False
    if address:
        check_address(address)
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(num_cpus=max_parallel or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                 runtime_env=env, configure_logging=False)
    return True


def check_address(address: str, timeout: float = 5.0) -> None:
    """InputError when nothing listens at a Ray cluster address (host:port or ray://host:port) within `timeout`
    seconds: ray.init would otherwise retry for about a minute."""
    if address == "auto":
        return
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--address {address!r}: expected HOST:PORT (the head node's GCS port, e.g. 10.0.0.1:6379) "
                         "or ray://HOST:10001")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise InputError(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc}); start one with "
                         "`ray start --head` or check the address and port") from None


def _ray_resources(kind: str, spec: RunSpec, has_gpu: bool) -> dict[str, float]:
    """Resources a task declares: one CPU; with a GPU in the cluster, an encode or a run that loads pixels
    (segmentation, LoRA) takes a whole GPU, a run on cached features a quarter."""
    if not has_gpu:
        return {"num_cpus": 1, "num_gpus": 0}
    from fairmedbench.adapters import USAGES

    usage = USAGES.get(spec.usage) if spec.usage else None
    light = kind == "run" and usage is not None and usage.caches_features
    return {"num_cpus": 1, "num_gpus": 0.25 if light else 1.0}


def worker_environment(pythonpath: str) -> dict[str, str]:
    """A Ray worker's environment variables: this checkout on its path, the driver's offline switch and kernel
    choices (engine.device.KERNEL_VARIABLES); its threads are Ray's (one per declared CPU), and a head trains on
    engine.device.HEAD_THREADS whatever they are."""
    from fairmedbench.engine.device import kernel_environment

    return {"PYTHONPATH": pythonpath, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "0"), **kernel_environment()}


def _run_ray(encodes: list[tuple], runs: list[tuple], options: dict[str, Any], state: str,
             finished: Callable[[dict], None], *, max_parallel: int | None, address: str | None) -> dict[str, dict]:
    """Ray tasks: each run depends on its encode (passed as an argument); results come back as they finish."""
    import ray

    started_here = ray_start(address, max_parallel)
    try:
        has_gpu = ray.cluster_resources().get("GPU", 0) > 0

        @ray.remote
        def task(kind: str, spec: RunSpec, opts: dict[str, Any], state_dir: str, name: str, *after: Any) -> dict:
            if any(a.get("status") == "failed" for a in after):
                return {"task": name, "kind": kind, "status": "skipped-encode-failed"}
            return execute_task(kind, spec, opts, state_dir, name)

        refs: dict[Any, str] = {}
        enc_refs: dict[str, Any] = {}
        for kind, spec, name in encodes:
            resources = _ray_resources(kind, spec, has_gpu)
            enc_refs[name] = task.options(**resources).remote(kind, spec, options, state, name)
            refs[enc_refs[name]] = name
        for kind, spec, name, enc in runs:
            deps = [enc_refs[enc]] if enc is not None else []
            refs[task.options(**_ray_resources(kind, spec, has_gpu)).remote(kind, spec, options, state, name,
                                                                           *deps)] = name
        outcomes: dict[str, dict] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                doc = ray.get(ready[0])
            except ray.exceptions.RayError as exc:  # the worker died (after Ray's own retries): record, go on
                name = refs[ready[0]]
                doc = _died("encode" if name in enc_refs else "run", name, exc)
            if doc["status"] == "skipped-encode-failed":
                continue
            outcomes[doc["task"]] = doc
            finished(doc)
        return outcomes
    finally:
        if started_here:
            ray.shutdown()


# ---------------------------------------------------------------------------------------------------- status

def read_status(out_root: str | Path, name: str) -> dict[str, Any]:
    """The study's cells with their current status from plan.json, the store and the journals: done (complete
    result in the store), running (journal running, process alive), stale (journal running, process gone),
    failed (journal failed), planned, skipped."""
    folder = study_dir(out_root, name)
    path = folder / "plan.json"
    if not path.is_file():
        raise MissingResourceError(f"no study {name!r} under {out_root}: run `benchmark sweep {name}` first "
                                   f"(looked for {path})")
    plan = store.read_json(path)
    for entry in plan["cells"]:
        if entry["run_id"] is None:
            continue
        run_dir = Path(out_root) / entry["run_dir"]
        journal = folder / "state" / f"{entry['run_id']}.json"
        doc = store.read_json(journal) if journal.is_file() else None
        if (run_dir / "summary.json").is_file():
            entry["status"], entry["error"] = "done", None
        elif doc is not None and doc["status"] == "running":
            alive = doc["host"] != platform.node() or store.pid_alive(int(doc["pid"]))
            entry["status"] = "running" if alive else "stale"
            if not alive:
                entry["error"] = f"killed (pid {doc['pid']} is gone); rerun the sweep to finish it"
        elif doc is not None and doc["status"] == "failed":
            entry["status"], entry["error"] = "failed", doc["error"]
    return plan


# ------------------------------------------------------------------------------------------------- rendering

def _cell_line(entry: dict[str, Any]) -> str:
    c = entry["cell"]
    extra = "".join(f" {k}={c[k]}" for k in ("prompt", "train_group_share", "prevalence") if c.get(k) is not None)
    if c.get("prevalence") is not None:
        extra += f" on {c['prevalence_on']}"
    return f"{entry['run_id'] or '-':16}  {c['model']} / {c['dataset']} / {c['usage']} / {c['mitigation']}{extra}"


def render_plan(plan: Plan, opts: RunOptions, progress: Callable[[str, int, int], None] | None = None) -> str:
    """The dry-run text: counts, every runnable cell with its run id and status, skipped cells grouped by
    reason, and the cost estimate with how it was measured (and, above the cost bounds, that the sweep needs
    --i-know)."""
    from fairmedbench.benchmark.costs import ASSUMED, estimate

    doc = plan.to_dict()
    runnable_cells = [e for e in doc["cells"] if e["status"] != "skipped"]
    done = sum(e["status"] == "done" for e in runnable_cells)
    absent = [e for e in runnable_cells if e["run_id"] is None]
    lines = [f"study {plan.study.name} ({plan.study.source}, sha256 {plan.study.sha256[:12]})",
             f"cells: {len(doc['cells'])} = {len(runnable_cells)} runnable + {len(plan.skipped)} skipped",
             f"runs: {len(runnable_cells)} runnable; {done} done in the store, {len(plan.runs)} to compute, "
             f"{len(absent)} not resolvable here (data or weights absent)",
             f"encodes: {len(plan.encodes)} (one feature extraction per model x weights x dataset x split x "
             "precision, shared by its runs)", "", "runs:"]
    for e in runnable_cells:
        note = e["status"] if e["run_id"] else (e["reason"] or "")
        lines.append(f"  {_cell_line(e)}  [{note}]")
    if plan.skipped:
        lines += ["", f"skipped ({len(plan.skipped)} cells), by reason:"]
        lines += [f"  {n:5d} x {reason}" for reason, n in group_reasons([p.cell for p in plan.skipped]).items()]
    est = estimate(plan, opts.device, plan.study.precision, progress=progress)
    lines += ["", f"cost estimate on {est['device']} ({est['precision']}):",
              f"  encoder throughput: {est['encoder_rate']['gflops_per_s']:.1f} GFLOP/s, measured with "
              f"{est['encoder_rate']['how']}",
              f"  head training: {est['head_rate']['s_per_unit'] * 1e9:.2f} s per 1e9 sample x feature x epoch, "
              f"measured with {est['head_rate']['how']}",
              "  encoder cost per image: the model built with random weights on the meta device, one image of its "
              "input size, FLOPs counted by torch.utils.flop_counter (else 2 x params x 16-px patches):"]
    for m, f in est["models"].items():
        per = est["s_per_1000_images"][m]
        lines.append(f"    {m:18} {f['gflops']:9.1f} GFLOP/image ({f['how']}); {per:8.1f} s per 1000 images"
                     if f["gflops"] else f"    {m:18} {f['how']}")
    c, t = est["counted"], est["totals"]
    lines.append(f"  {c['measured']} runs on data present: {_hours(t['measured'])}")
    if c["assumed"]:
        lines.append(f"  {c['assumed']} runs whose data is absent (size unknown), costed as if each dataset had "
                     f"{sum(ASSUMED)} images ({'/'.join(map(str, ASSUMED))} train/val/test): {_hours(t['assumed'])}; "
                     "scale by each dataset's size in thousands of images")
    if c["unknown"]:
        lines.append(f"  {c['unknown']} runs of unknown cost (their model's FLOPs could not be counted)")
    r, rate = est["resampling"], est["resample_rate"]
    lines.append(f"  of which bootstrap and permutation tests ({plan.study.n_boot} resamples and {plan.study.n_perm} "
                 f"permutations x test rows x task-attribute pairs x seeds, at {rate['how']}): "
                 f"{_hours(r['measured'] + r['assumed'])}")
    over = over_cost_bounds(cost_values(plan.study))
    if over:
        lines.append(f"  above the documented bound: {', '.join(over.values())}: benchmark sweep needs --i-know")
    if est["by_usage"]:
        lines.append("  by usage: " + ", ".join(f"{u} {_hours(v)}" for u, v in
                                                sorted(est["by_usage"].items(), key=lambda kv: -kv[1])))
    return "\n".join(lines)


def _hours(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 3600:.2f} h"


def render_status(plan: dict[str, Any]) -> str:
    """`--status`: counts per status, then running / stale / failed / planned cells, skipped ones by reason."""
    from collections import Counter

    counts = Counter(e["status"] for e in plan["cells"])
    lines = [f"study {plan['study']} ({plan['source']}): " + ", ".join(
        f"{counts.get(s, 0)} {s}" for s in ("done", "running", "stale", "failed", "planned", "skipped"))]
    for status in ("running", "stale", "failed", "planned", "done"):
        cells = [e for e in plan["cells"] if e["status"] == status]
        if cells:
            lines.append(f"{status}:")
            lines += [f"  {_cell_line(e)}" + (f"  {e['error'] or e['reason']}" if e["error"] or e["reason"] else "")
                      for e in cells]
    skipped = Counter(e["reason"] for e in plan["cells"] if e["status"] == "skipped")
    if skipped:
        lines.append("skipped, by reason:")
        lines += [f"  {n:5d} x {reason}" for reason, n in skipped.most_common()]
    return "\n".join(lines)


def render_result(result: SweepResult) -> str:
    """The closing line of a sweep."""
    from collections import Counter

    counts = Counter(c.status for c in result.plan.cells)
    return (f"study {result.plan.study.name}: {result.encodes} encodes, {result.ran} runs computed, "
            f"{counts.get('done', 0)} cells done, {counts.get('failed', 0)} failed, "
            f"{counts.get('skipped', 0)} skipped; "
            f"state in {result.plan.study.name}/plan.json under <out>/studies")
