"""`benchmark submit` and `benchmark leaderboard build`: the board's suite looked up, then leaderboards/ called.

The leaderboards package (jsonschema, the metric engine) is imported when a command runs, not when the parser is
built, so `benchmark list` stays instant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fairmedbench.errors import InputError, MissingResourceError
from fairmedbench.spec import option

if TYPE_CHECKING:
    from fairmedbench.leaderboards.submit import Limits, Outcome
    from fairmedbench.leaderboards.suites import Suite

DEFAULT_ROOT = "leaderboards"


@dataclass(frozen=True)
class SubmitOptions:
    """`benchmark submit`'s options."""

    bundle: str = field(metadata=option(flag="bundle"))
    board: str = field(metadata=option(required=True))
    root: str = field(default=DEFAULT_ROOT, metadata=option("folder holding the boards"))


@dataclass(frozen=True)
class BoardOptions:
    """`benchmark leaderboard build`'s options."""

    board: str = field(metadata=option(required=True))
    root: str = field(default=DEFAULT_ROOT, metadata=option())
    sign_key: str | None = field(default=None, metadata=option(
        "sign each verified row's evidence pack (<board>/evidence/<row>/MANIFEST.sig) with hmac:FILE or "
        "ed25519:FILE; default: $FMB_SIGN_KEY", metavar="KEY"))


def _board(board: str, root: Path | str) -> tuple[Suite, Path]:
    """The board's suite (an unknown name fails here, listing the known ones) and its folder."""
    from fairmedbench.leaderboards.suites import get_suite

    return get_suite(board), Path(root) / board


def submit_bundle(bundle: Path | str, board: str, root: Path | str = DEFAULT_ROOT,
                  limits: Limits | None = None) -> Outcome:
    """Validate a bundle for board `board` (a suite name) and store it under root/<board>/submissions/ if it passes.

    The outcome's `lines()` are what the CLI prints (one per reason); exit non-zero when not `accepted`.
    """
    from fairmedbench.leaderboards.submit import submit

    suite, folder = _board(board, root)  # an unknown board is named before a missing bundle
    if not Path(bundle).exists():
        raise MissingResourceError(f"bundle {bundle} not found; `benchmark run-suite {board} --model M` writes one")
    return submit(bundle, suite, folder, limits)


def build_board(board: str, root: Path | str = DEFAULT_ROOT, progress: Callable[[str], None] | None = None,
                sign_key: str | None = None) -> dict[str, Path]:
    """Render root/<board>/index.html, leaderboard.md and board.json from the accepted submissions, each one's seal
    checked and every number recomputed first (`progress` gets a line per submission), then one evidence pack per
    verified row under root/<board>/evidence/<row>/ (claim_packs.board_packs; keys 'evidence:<row>')."""
    import json

    from fairmedbench.benchmark.claim_packs import board_packs, check_board_evidence
    from fairmedbench.benchmark.signing import signing_key
    from fairmedbench.leaderboards import board as pages

    suite, folder = _board(board, root)
    if not pages.submission_dirs(folder):
        raise InputError(f"board {board!r} has no accepted submissions under {folder / 'submissions'}; "
                         f"submit one with `benchmark submit BUNDLE --board {board}`")
    key = signing_key(sign_key)  # read (or refused) before any work, as the evidence folder is checked
    check_board_evidence(folder)
    built = pages.build(folder, suite, progress)
    packs = board_packs(folder, json.loads(built["json"].read_text()), key)
    return {**built, **{f"evidence:{p.name}": p for p in packs}}
