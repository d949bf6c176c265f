"""`benchmark serve token ...` and `benchmark submit`'s remote options on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairmedbench.cli import main
from fairmedbench.serve import tokens
from fairmedbench.serve.service import Service


def test_token_add_prints_the_token_once_and_list_never_shows_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    boards = str(tmp_path / "boards")
    assert main(["serve", "token", "add", "alice", "--boards", boards, "--expires", "30"]) == 0
    token = capsys.readouterr().out.strip()
    assert Service(boards).authenticate(f"Bearer {token}").name == "alice"
    assert main(["serve", "token", "list", "--boards", boards]) == 0
    assert main(["serve", "audit", "--boards", boards]) == 0
    listed = capsys.readouterr().out
    secret = tokens.TOKEN_RE.fullmatch(token).group(2)  # the secret may hold '_'
    assert '"name": "alice"' in listed and '"token add"' in listed and secret not in listed
    assert main(["serve", "token", "revoke", "alice", "--boards", boards]) == 0
    assert main(["serve", "token", "revoke", "nobody", "--boards", boards]) == 2
    assert main(["serve", "token", "add", "Not A Name", "--boards", boards]) == 2
    assert "submitter name" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "line"), [
    (["submit", "--status", "abc"], "--status ID needs --to URL"),
    (["submit", "bundle"], "needs a BUNDLE and --board NAME"),
    (["submit", "--to", "http://127.0.0.1:9", "bundle"], "needs a BUNDLE and --token-file FILE"),
    (["submit", "--to", "ftp://x", "--status", "abc"], "give the board server's URL"),
])
def test_remote_submit_refusals_are_one_line(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert line in err and "\n" not in err


@pytest.mark.parametrize(("extra", "line"), [
    (["--address", "127.0.0.1:6379"], "--address and --max-parallel are options of --launcher ray"),
    (["--max-parallel", "2"], "--address and --max-parallel are options of --launcher ray"),
    (["--launcher", "ray", "--max-parallel", "0"], "--max-parallel must be at least 1, got 0"),
])
def test_worker_launcher_refusals_are_one_line(extra: list[str], line: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "worker", "--boards", str(tmp_path / "boards"), "--once", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert line in err and "\n" not in err
