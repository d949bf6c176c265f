"""Feature extraction and cache: second run reads the cache (no forward pass); keys invalidate; progress is
reported; staging folders of killed processes are cleaned; precision 'auto' keys the cache by its resolution."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
import torch

from fairmedbench.engine.features import cache_key, extract_features
from fairmedbench.errors import InputError


class TinySplit:
    """Stand-in for a dataset split: ids, uint8 images, a fingerprint."""

    def __init__(self, n: int = 48, size: int = 64, fingerprint: str = "tiny-v1", seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, (n, size, size), dtype=np.uint8)
        self.sample_ids = [f"img{i:03d}" for i in range(n)]
        self.fingerprint = fingerprint

    def __len__(self) -> int:
        return len(self.sample_ids)

    def load_image(self, i: int) -> np.ndarray:
        return self.images[i]


class CountingEncoder:
    """A small conv encoder that counts its forward passes."""

    def __init__(self, weights_id: str = "w1") -> None:
        torch.manual_seed(0)
        self.module = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, padding=1),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        )
        self.weights_id = weights_id
        self.forwards = 0

    def to(self, device: str) -> CountingEncoder:
        self.module.to(device)
        return self

    def cache_identity(self) -> dict[str, str]:
        return {"model": "counting", "weights": self.weights_id, "preprocessing": "x/255 gray->3", "pooling": "avg"}

    def encoder_path(self, device: str, precision: str) -> str:
        return "torch"

    def preprocess(self, image: np.ndarray) -> np.ndarray:
        return np.repeat(image[None].astype(np.float32) / 255.0, 3, axis=0)

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        return self.module(pixels)


def test_second_extraction_reads_the_cache_without_a_forward_pass(tmp_path: Path) -> None:
    split, enc = TinySplit(), CountingEncoder()
    first = extract_features(enc, split, split_name="train", cache_dir=tmp_path, batch_size=16, device="cpu")
    assert not first.from_cache and enc.forwards == 3
    assert first.array.shape == (48, 64) and first.sample_ids == split.sample_ids
    direct = enc.module(torch.from_numpy(np.stack([enc.preprocess(im) for im in split.images]))).detach().numpy()
    np.testing.assert_allclose(np.asarray(first.array), direct, rtol=1e-4, atol=1e-5)
    second = extract_features(enc, split, split_name="train", cache_dir=tmp_path, batch_size=16, device="cpu")
    assert second.from_cache and enc.forwards == 3
    assert isinstance(second.array, np.memmap)
    np.testing.assert_array_equal(np.asarray(second.array), np.asarray(first.array))


def test_changed_weights_split_or_dataset_recompute(tmp_path: Path) -> None:
    split, enc = TinySplit(n=8), CountingEncoder()
    extract_features(enc, split, split_name="train", cache_dir=tmp_path, device="cpu")
    assert enc.forwards == 1
    extract_features(enc, split, split_name="val", cache_dir=tmp_path, device="cpu")
    assert enc.forwards == 2
    enc.weights_id = "w2"
    extract_features(enc, split, split_name="train", cache_dir=tmp_path, device="cpu")
    assert enc.forwards == 3
    other = TinySplit(n=8, fingerprint="tiny-v2", seed=1)
    res = extract_features(enc, other, split_name="train", cache_dir=tmp_path, device="cpu")
    assert enc.forwards == 4 and not res.from_cache
    keys = {cache_key(enc, s, n, p)[0] for s in (split, other) for n in ("train", "val") for p in ("fp32", "bf16")}
    assert len(keys) == 8


def test_dataloader_workers_give_the_same_features(tmp_path: Path) -> None:
    split, enc = TinySplit(n=20), CountingEncoder()
    a = extract_features(enc, split, split_name="train", cache_dir=None, batch_size=8, num_workers=0)
    b = extract_features(enc, split, split_name="train", cache_dir=None, batch_size=8, num_workers=2)
    np.testing.assert_allclose(a.array, b.array, rtol=1e-5, atol=1e-6)


def _extract_in_process(cache_dir: str, queue: mp.Queue[str]) -> None:
    res = extract_features(CountingEncoder(), TinySplit(n=24), split_name="train", cache_dir=cache_dir, device="cpu")
    queue.put(res.key)


def test_two_processes_at_once_leave_one_complete_entry(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")  # fork after torch threads start can deadlock
    queue = ctx.Queue()
    procs = [ctx.Process(target=_extract_in_process, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    keys = {queue.get(timeout=5), queue.get(timeout=5)}
    assert len(keys) == 1
    entries = [p for p in (tmp_path / "counting").iterdir()]
    assert [p.name for p in entries if p.name.startswith(".tmp")] == []
    assert len(entries) == 1 and (entries[0] / "meta.json").is_file()
    enc = CountingEncoder()
    assert extract_features(enc, TinySplit(n=24), split_name="train", cache_dir=tmp_path).from_cache
    assert enc.forwards == 0


def test_bad_arguments_are_input_errors(tmp_path: Path) -> None:
    split = TinySplit(n=4)
    with pytest.raises(InputError, match="precision"):
        extract_features(CountingEncoder(), split, split_name="train", cache_dir=tmp_path, precision="fp8")
    split.fingerprint = ""
    with pytest.raises(InputError, match="fingerprint"):
        extract_features(CountingEncoder(), split, split_name="train", cache_dir=tmp_path)


def test_device_and_precision_selection() -> None:
    from fairmedbench.engine.device import check_precision, select_device

    assert select_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert select_device("cpu") == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            select_device("cuda")
    with pytest.raises(InputError, match="expected auto"):
        select_device("tpu")
    assert check_precision("bf16") == "bf16"


def test_default_workers_leave_cpu_cores_to_the_encoder() -> None:
    from fairmedbench.engine.features import default_workers

    assert default_workers("cpu") == 0
    assert 0 <= default_workers("cuda") <= 4


def test_progress_is_reported_after_each_batch(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    extract_features(CountingEncoder(), TinySplit(n=20), split_name="train", cache_dir=tmp_path, batch_size=8,
                     device="cpu", progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 20), (8, 20), (16, 20), (20, 20)]


def test_staging_folders_of_dead_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    import os
    import platform
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)  # a process that has exited (a killed extraction leaves the same)
    folder = tmp_path / "counting"
    stale_new = folder / f".tmp-0123456789ab-k3j_x9a1-{dead_pid}@{platform.node()}"
    stale_old = folder / f".tmp-0123456789ab-{dead_pid}-1a2b3c4d"  # the earlier naming
    live = folder / f".tmp-0123456789ab-zz99yy88-{os.getpid()}@{platform.node()}"
    other_host = folder / f".tmp-0123456789ab-aa11bb22-{dead_pid}@another-host.example"
    for d in (stale_new, stale_old, live, other_host):
        (d / "sub").mkdir(parents=True)
        (d / "features.npy").write_bytes(b"partial")
    res = extract_features(CountingEncoder(), TinySplit(n=8), split_name="train", cache_dir=tmp_path, device="cpu")
    assert not res.from_cache
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith(".tmp-"))
    assert left == sorted([live.name, other_host.name])


def test_auto_precision_keys_the_cache_by_what_it_resolves_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fairmedbench.engine import features

    monkeypatch.setattr(features, "resolve_precision", lambda p, d: "fp32" if p == "auto" else p)  # as on an AVX2 CPU
    enc, split = CountingEncoder(), TinySplit(n=8)
    first = extract_features(enc, split, split_name="train", cache_dir=tmp_path, device="cpu", precision="fp32")
    again = extract_features(enc, split, split_name="train", cache_dir=tmp_path, device="cpu", precision="auto")
    assert again.from_cache and again.key == first.key and enc.forwards == 1


KILLED_EXTRACTION = """
import sys, time
sys.path.insert(0, sys.argv[2])
import torch
from test_features import CountingEncoder, TinySplit
from fairmedbench.engine.features import extract_features

class Slow(CountingEncoder):
    def encode_image(self, pixels):
        time.sleep(0.5 if self.forwards == 0 else 600)  # hangs in the second batch, its staging folder written
        return super().encode_image(pixels)

extract_features(Slow(), TinySplit(n=8), split_name="train", cache_dir=sys.argv[1], batch_size=4, device="cpu")
"""


def test_kill_9_during_extraction_then_rerun_completes_and_leaves_no_staging(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_EXTRACTION, str(tmp_path), str(Path(__file__).parent)],
                            env=env)
    try:
        for _ in range(1200):  # up to 2 min for torch to import on a busy machine; no timing is asserted
            if list((tmp_path / "counting").glob(".tmp-*/features.npy")) or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the extraction ended before it could be killed"
        assert len(list((tmp_path / "counting").glob(".tmp-*"))) == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    enc = CountingEncoder()
    res = extract_features(enc, TinySplit(n=8), split_name="train", cache_dir=tmp_path, batch_size=4, device="cpu")
    assert not res.from_cache and enc.forwards == 2 and res.array.shape == (8, 64)
    assert [p.name for p in (tmp_path / "counting").iterdir() if p.name.startswith(".tmp-")] == []


class _Clock:
    """A fake perf_counter that moves only when the test says: 1 s per image read, 10 per preprocess, 100 per
    encoder call."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_extraction_times_each_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    clock = _Clock()
    monkeypatch.setattr(time, "perf_counter", clock)
    split, enc = TinySplit(n=5, size=8), CountingEncoder()
    read, pre, encode = split.load_image, enc.preprocess, enc.encode_image

    def timed(step: float, fn):  # noqa: ANN001, ANN202
        def call(*args):  # noqa: ANN002, ANN202
            clock.now += step
            return fn(*args)
        return call

    monkeypatch.setattr(split, "load_image", timed(1.0, read))
    monkeypatch.setattr(enc, "preprocess", timed(10.0, pre))
    monkeypatch.setattr(enc, "encode_image", timed(100.0, encode))
    feats = extract_features(enc, split, split_name="train", cache_dir=None, batch_size=2, device="cpu")
    # 5 images in batches of 2, 2, 1: 3 encoder calls; nothing is cached, so storing rows takes no fake time
    assert feats.stages == {"read": 5.0, "preprocess": 50.0, "collate": 0.0, "encode": 300.0, "store": 0.0}
    assert feats.seconds == 355.0 and feats.encoded == 5
