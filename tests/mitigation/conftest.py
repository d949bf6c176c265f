"""Toy data for mitigation tests: Gaussian features whose label direction depends on the group."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

from fairmedbench.tasks.classification import SplitArrays


def make_split(n: int, seed: int, minority: float = 0.1, d: int = 6, k: int = 1,
               minority_scale: float = 3.0) -> SplitArrays:
    """Group 1 (a `minority` fraction) has its label on feature 1 (logit scale `minority_scale`), group 0
    on feature 0 (scale 3); extra labels (k > 1) use features 2.. for everyone."""
    rng = np.random.default_rng(seed)
    g = (rng.random(n) < minority).astype(np.int64)
    x = rng.normal(size=(n, d))
    first = np.where(g == 0, x[:, 0], x[:, 1])
    cols = [first] + [x[:, 1 + j] for j in range(1, k)]
    logits = 3.0 * np.stack(cols, axis=1)
    logits[:, 0] *= np.where(g == 0, 1.0, minority_scale / 3.0)
    y = (rng.random(logits.shape) < 1 / (1 + np.exp(-logits))).astype(np.float64)
    return SplitArrays(x=x, y=y if k > 1 else y[:, 0], groups=g, n_groups=2)


@pytest.fixture
def toy() -> Callable[..., tuple[SplitArrays, SplitArrays, SplitArrays]]:
    """(train, val, test) of the toy problem with independent seeds."""

    def build(n: int = 600, seed: int = 0, n_test: int | None = None,
              **kw: float) -> tuple[SplitArrays, SplitArrays, SplitArrays]:
        return (make_split(n, 3 * seed, **kw), make_split(n // 2, 3 * seed + 1, **kw),
                make_split(n_test or n // 2, 3 * seed + 2, **kw))

    return build


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny models train fastest on one thread (and do not fight other processes for the 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
