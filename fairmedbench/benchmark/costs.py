"""Cost estimates for a study plan, from measurements on this machine (cached in
~/.cache/fairmedbench/costs.json, keyed by model or by device + precision).

- Encoder FLOPs per image: the model card built with random weights on PyTorch's meta device (no memory, no
  weights read) and one image of the card's input size counted by `torch.utils.flop_counter.FlopCounterMode`.
  Where that forward cannot run on the meta device, FLOPs ~= 2 x parameters x patches (16-pixel patches of the
  input; the rule for a ViT), and the estimate says so.
- This machine's encoder throughput: a small encoder (c2l, ResNet-18, random weights) timed on 2 images at
  224 px (after one warm-up batch) on the device and precision the runs use; FLOPs counted the same way.
- Head training: a linear head trained with Adam on random features, timed per sample x feature x epoch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairmedbench.tasks.base import get_task

if TYPE_CHECKING:
    import torch

    from fairmedbench.benchmark.sweep import Plan
    from fairmedbench.registry.models.card import ModelCard

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fairmedbench" / "costs.json"
PATCH = 16


def _cache() -> dict[str, Any]:
    try:
        return json.loads(CACHE.read_text())
    except (OSError, ValueError):
        return {}


def _remember(key: str, value: dict[str, Any]) -> dict[str, Any]:
    from fairmedbench.engine.store import write_json

    data = _cache()
    data[key] = value
    try:
        write_json(CACHE, data)
    except OSError:  # a read-only home: the estimate still prints, it is just not remembered
        pass
    return value


def _image(card: ModelCard, device: str) -> torch.Tensor:
    import torch

    pre = card.preprocessing
    shape = (1, pre.channels, pre.depth, pre.size, pre.size) if pre.depth else (1, pre.channels, pre.size, pre.size)
    return torch.zeros(shape, device=device)


def model_flops(name: str) -> dict[str, Any]:
    """{"gflops": per image or None, "how": "counted" | "2 x params x patches" | why unknown}."""
    from fairmedbench.registry.models import get_card

    card = get_card(name)
    key = f"flops|{name}|{card.preprocessing.describe()}"
    hit = _cache().get(key)
    if hit is not None:
        return hit
    import warnings

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from fairmedbench.registry.models import load_model

    device = "meta"
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = load_model(name, "random", device="meta")
    except Exception:  # noqa: BLE001  (a loader that copies tensors: built for real on the CPU, random weights)
        device = "cpu"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = load_model(name, "random", device="cpu")
        except Exception as exc:  # noqa: BLE001  (any build failure only makes this model's cost unknown)
            return {"gflops": None, "how": f"unknown (the model cannot be built: {type(exc).__name__})"}
    params = sum(p.numel() for p in model.module.parameters())
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.encode_image(_image(card, device))
        out = {"gflops": counter.get_total_flops() / 1e9, "how": "counted" + (" (built on the CPU)" if device == "cpu"
                                                                               else "")}
    except Exception:  # noqa: BLE001  (forward not traceable on meta: the parameter rule)
        pre = card.preprocessing
        patches = (pre.size // PATCH) ** 2 * max(1, pre.depth // PATCH)
        out = {"gflops": 2 * params * patches / 1e9, "how": "2 x params x patches"}
    out["params"] = params
    return _remember(key, out)


def encoder_rate(device: str, precision: str) -> dict[str, Any]:
    """{"gflops_per_s", "how"}: this machine's encoder throughput on `device` at `precision` (measured once)."""
    import torch

    key = f"rate2|{device}|{precision}|threads={torch.get_num_threads()}"
    hit = _cache().get(key)
    if hit is not None:
        return hit
    from torch.utils.flop_counter import FlopCounterMode

    from fairmedbench.engine.device import autocast
    from fairmedbench.registry.models import get_card, load_model

    cuda = device.startswith("cuda")
    batch, reps = (32, 5) if cuda else (2, 1)  # a GPU is measured at a batch that fills it, as runs use it
    model = load_model("c2l", "random", device=device)
    x = _image(get_card("c2l"), device).repeat(batch, 1, 1, 1)
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
    return _remember(key, {"gflops_per_s": rate, "how": f"c2l (ResNet-18, random weights), {batch} images at 224 "
                                                        f"px on {device} {precision}: {seconds:.3f} s per batch"})


def head_rate(device: str) -> dict[str, Any]:
    """{"s_per_unit", "how"}: seconds to train a linear head per (sample x feature x epoch), measured once."""
    key = f"head|{device}"
    hit = _cache().get(key)
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
    return _remember(key, {"s_per_unit": seconds / (n * d * epochs),
                           "how": f"a linear head, Adam, batch 64, {n} x {d} features x {epochs} epochs: "
                                  f"{seconds:.3f} s"})


ASSUMED = (700, 100, 200)  # train, val, test images of a dataset whose data is absent: costs per 1000 images


def estimate(plan: Plan, device: str, precision: str) -> dict[str, Any]:
    """Seconds of the encodes and runs `plan` still has to compute, with how each rate was measured. Sizes come
    from the resolved splits; a cell whose data is absent is costed at 1000 images (ASSUMED) and counted apart."""
    from fairmedbench.adapters import USAGES
    from fairmedbench.benchmark.resolve import check_spec
    from fairmedbench.engine.device import resolve_precision, select_device
    from fairmedbench.registry.models import get_card

    device = select_device(device)
    precision = resolve_precision(precision, device)
    rate, head = encoder_rate(device, precision), head_rate(device)
    todo = [p for p in plan.cells if p.status == "planned" and (p.run_id is None or p.resolved is not None)]
    flops = {m: model_flops(m) for m in sorted({p.cell.fields["model"] for p in todo})}
    per_1000 = {m: (f["gflops"] * 1000 / rate["gflops_per_s"] if f["gflops"] else None) for m, f in flops.items()}
    totals = {"measured": 0.0, "assumed": 0.0}
    counted = {"measured": 0, "assumed": 0, "unknown": 0}
    encoded: set[str | tuple[str, str]] = set()
    by_usage: dict[str, float] = {}  # seconds per usage, present and absent data together
    for p in todo:
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
        if cost is None:
            counted["unknown"] += 1
        else:
            totals[kind] += cost
            counted[kind] += 1
            by_usage[usage.name] = by_usage.get(usage.name, 0.0) + cost
    return {"device": device, "precision": precision, "encoder_rate": rate, "head_rate": head, "models": flops,
            "s_per_1000_images": per_1000, "totals": totals, "counted": counted, "by_usage": by_usage}
