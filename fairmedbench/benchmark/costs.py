"""Cost estimates for a study plan, from measurements on this machine (cached in
~/.cache/fairmedbench/costs.json, keyed by model or by device + precision).

- Encoder FLOPs per image: the model card built with random weights on PyTorch's meta device (no memory, no
  weights read) and one image of the card's input size counted by `torch.utils.flop_counter.FlopCounterMode`.
  Where that forward cannot run on the meta device, FLOPs ~= 2 x parameters x patches (16-pixel patches of the
  input; the rule for a ViT), and the estimate says so.
- This machine's encoder throughput: a small encoder (c2l, ResNet-18, random weights) timed on 2 images at
  224 px (after one warm-up batch) on the device and precision the runs use; FLOPs counted the same way.
- Head training: a linear head trained with Adam on random features, timed per sample x feature x epoch.
- Bootstrap and permutation tests: the seconds per test row of one resample (and of one permutation) of one
  task-attribute pair's classification metrics, timed on RATE_ROWS generated rows with patients (50 of each, less
  the same call without them); a command's resampling costs fits x pairs x rows x (n_boot x that + n_perm x
  that), linear in rows as the engine is (one pass over the sorted scores per resample).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fairmedbench.engine.flops import cached, image, model_flops, remember
from fairmedbench.tasks.base import get_task

if TYPE_CHECKING:

    from fairmedbench.benchmark.resolve import Checked
    from fairmedbench.benchmark.sweep import Plan

def encoder_rate(device: str, precision: str) -> dict[str, Any]:
    """{"gflops_per_s", "how"}: this machine's encoder throughput on `device` at `precision` (measured once)."""
    import torch

    key = f"rate2|{device}|{precision}|threads={torch.get_num_threads()}"
    hit = cached().get(key)
    if hit is not None:
        return hit
    from torch.utils.flop_counter import FlopCounterMode

    from fairmedbench.engine.device import autocast
    from fairmedbench.registry.models import get_card, load_model

    cuda = device.startswith("cuda")
    batch, reps = (32, 5) if cuda else (2, 1)  # a GPU is measured at a batch that fills it, as runs use it
    model = load_model("c2l", "random", device=device)
    x = image(get_card("c2l"), device).repeat(batch, 1, 1, 1)
    with torch.no_grad(), autocast(device, precision):
        model.encode_image(x)  # warm-up
        with FlopCounterMode(display=False) as counter:
            model.encode_image(x)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            model.encode_image(x)
        if cuda:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / reps
    rate = counter.get_total_flops() / 1e9 / seconds
    return remember(key, {"gflops_per_s": rate, "how": f"c2l (ResNet-18, random weights), {batch} images at 224 "
                                                        f"px on {device} {precision}: {seconds:.3f} s per batch"})


def head_rate(device: str) -> dict[str, Any]:
    """{"s_per_unit", "how"}: seconds to train a linear head per (sample x feature x epoch), measured once."""
    key = f"head|{device}"
    hit = cached().get(key)
    if hit is not None:
        return hit
    import torch

    n, d, epochs = 2048, 512, 3
    x, y = torch.randn(n, d, device=device), torch.randint(0, 2, (n, 1), device=device).float()
    head = torch.nn.Linear(d, 1).to(device)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    for _ in range(epochs):
        for i in range(0, n, 64):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(head(x[i:i + 64]), y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    seconds = time.perf_counter() - t0
    return remember(key, {"s_per_unit": seconds / (n * d * epochs),
                           "how": f"a linear head, Adam, batch 64, {n} x {d} features x {epochs} epochs: "
                                  f"{seconds:.3f} s"})


RATE_ROWS, RATE_RESAMPLES = 20_000, 50


def resample_rate() -> dict[str, Any]:
    """{"boot_s_per_row", "perm_s_per_row", "how"}: seconds per test row of one bootstrap resample and of one
    permutation of one task-attribute pair's classification metrics here (measured once, then cached)."""
    key = f"resample|rows={RATE_ROWS}"
    hit = cached().get(key)
    if hit is not None:
        return hit
    import numpy as np

    from fairmedbench.spec import ScoreSettings
    from fairmedbench.tasks.base import PredictionTable

    n, rng = RATE_ROWS, np.random.default_rng(0)
    y = np.arange(n) % 2
    table = PredictionTable({"label:t": y, "score:t": np.clip(0.4 * y + rng.uniform(size=n) * 0.6, 0, 1),
                             "attr:g": np.where(np.arange(n) % 4 < 2, "a", "b"),
                             "patient_id": np.arange(n) // 2}, ("t",), ("g",))
    task = get_task("classification")
    took = []
    for b, p in ((0, 0), (RATE_RESAMPLES, 0), (0, RATE_RESAMPLES)):
        t0 = time.process_time()
        task.score(table, ScoreSettings(n_boot=b, n_perm=p, min_group_size=1))
        took.append(time.process_time() - t0)
    boot, perm = (max(t - took[0], 0.0) / (RATE_RESAMPLES * n) for t in took[1:])
    return remember(key, {"boot_s_per_row": boot, "perm_s_per_row": perm,
                           "how": f"{RATE_RESAMPLES} resamples and {RATE_RESAMPLES} permutations of {n:,} generated "
                                  f"rows (2 per patient, 2 groups) timed here: {boot * 1e9:.0f} and {perm * 1e9:.0f} "
                                  "CPU-ns per row each"})


def resampling_seconds(fits: int, pairs: int, rows: int, n_boot: int, n_perm: int,
                       rate: dict[str, Any] | None = None) -> float:
    """Seconds of the bootstrap and permutation tests of `fits` trained models (or evaluated files), each scored
    on `rows` test rows for `pairs` task-attribute pairs: fits x pairs x rows x (n_boot x the per-row resample
    cost + n_perm x the per-row permutation cost); `rate`: resample_rate() unless given."""
    rate = resample_rate() if rate is None else rate
    return fits * pairs * rows * (n_boot * rate["boot_s_per_row"] + n_perm * rate["perm_s_per_row"])


def describe_resampling(fits: int, pairs: int, rows: int, n_boot: int, n_perm: int) -> tuple[float, str]:
    """`resampling_seconds` and the words for it."""
    rate = resample_rate()
    seconds = resampling_seconds(fits, pairs, rows, n_boot, n_perm, rate)
    return seconds, (f"about {duration(seconds)} of bootstrap and permutation tests ({n_boot} resamples and "
                     f"{n_perm} permutations x {rows} test rows x {pairs} task-attribute pair(s) x {fits} fit(s), at "
                     f"{rate['how']})")


def task_attribute_pairs(checked: Checked) -> int:
    """The task-attribute pairs a run scores: its attributes x its label columns (the main one, or with
    tasks=all the dataset card's extra ones too)."""
    tasks = 1 + (len(checked.dataset_card.extra_label_columns) if checked.train_hparams.get("tasks") == "all" else 0)
    return max(len(checked.attributes), 1) * tasks


def duration(seconds: float) -> str:
    """Seconds in words: '40 s', '12 min', '3.5 h'."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


ASSUMED = (700, 100, 200)  # train, val, test images of a dataset whose data is absent: costs per 1000 images


def estimate(plan: Plan, device: str, precision: str,
             progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Seconds of the encodes and runs `plan` still has to compute (their bootstrap and permutation tests
    included), with how each rate was measured. Sizes come from the resolved splits; a cell whose data is absent
    is costed at 1000 images (ASSUMED) and counted apart."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.benchmark.resolve import check_spec
    from fairmedbench.engine.device import resolve_precision, select_device
    from fairmedbench.registry.models import get_card

    device = select_device(device)
    precision = resolve_precision(precision, device)
    rate, head, resample = encoder_rate(device, precision), head_rate(device), resample_rate()
    todo = [p for p in plan.cells if p.status == "planned" and (p.run_id is None or p.resolved is not None)]
    flops = {m: model_flops(m) for m in sorted({p.cell.fields["model"] for p in todo})}
    per_1000 = {m: (f["gflops"] * 1000 / rate["gflops_per_s"] if f["gflops"] else None) for m, f in flops.items()}
    totals = {"measured": 0.0, "assumed": 0.0}
    resampling = {"measured": 0.0, "assumed": 0.0}  # of the totals: the bootstrap and permutation tests
    counted = {"measured": 0, "assumed": 0, "unknown": 0}
    encoded: set[str | tuple[str, str]] = set()
    by_usage: dict[str, float] = {}  # seconds per usage, present and absent data together
    for i, p in enumerate(todo):
        if progress is not None:
            progress(f"estimate study {plan.study.name}: runs costed", i, len(todo))
        checked = check_spec(p.cell.spec)
        usage, model = USAGES.get(checked.usage.name), p.cell.fields["model"]
        sizes = (tuple(len(getattr(p.resolved.split, s)) for s in ("train", "val", "test")) if p.resolved
                 else ASSUMED)
        kind = "measured" if p.resolved else "assumed"
        enc = per_1000[model]
        seeds, epochs = len(p.cell.spec.seeds), int(checked.train_hparams.get("epochs", 1) or 1)
        n_train, n_all = sizes[0], sum(sizes)
        cost: float | None
        if usage.caches_features:
            cost = seeds * epochs * n_train * get_card(model).embedding_dim * head["s_per_unit"]
            key = p.encode or (model, p.cell.fields["dataset"])
            if key not in encoded and enc is not None:
                encoded.add(key)
                cost += enc * n_all / 1000
        elif enc is None:
            cost = None
        elif get_task(usage.task).head == "classifier":  # trains through the encoder: forward + backward ~ 3x
            cost = enc / 1000 * (seeds * epochs * n_train * 3 + seeds * (n_all - n_train))
        elif usage.learns:  # encoder maps of every split once; the decoder's training counted as 10% per epoch
            cost = enc / 1000 * n_all * (1 + 0.1 * seeds * epochs)
        else:  # prompted: the test images once per seed
            cost = enc / 1000 * sizes[2] * seeds
        if cost is not None:  # every seed's test rows: bootstrap and permutation tests of each task-attribute pair
            boot = resampling_seconds(seeds, task_attribute_pairs(checked), sizes[2], p.cell.spec.n_boot,
                                      p.cell.spec.n_perm, resample)
            resampling[kind] += boot
            cost += boot
        if cost is None:
            counted["unknown"] += 1
        else:
            totals[kind] += cost
            counted[kind] += 1
            by_usage[usage.name] = by_usage.get(usage.name, 0.0) + cost
    if progress is not None:
        progress(f"estimate study {plan.study.name}: runs costed", len(todo), len(todo))
    return {"device": device, "precision": precision, "encoder_rate": rate, "head_rate": head, "models": flops,
            "s_per_1000_images": per_1000, "totals": totals, "counted": counted, "by_usage": by_usage,
            "resampling": resampling, "resample_rate": resample}
