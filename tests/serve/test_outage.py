"""A database that goes away mid-request (the cheap sibling of the PostgreSQL restart under load, on SQLite): the
client gets one clear 503, and sending the same bundle again finishes that submission exactly once."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
from serve_support import auth, tar_of

from fairmedbench.leaderboards import submit
from fairmedbench.serve.service import Service


def test_a_submission_cut_off_after_storing_is_finished_by_sending_it_again(
        service: Service, client: Any, bundles: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    token = service.add_token("alice")
    store = submit.store_submission

    def store_then_lose_the_database(*args: Any) -> NoReturn:
        store(*args)
        raise sa.exc.OperationalError("UPDATE submissions ...", None, Exception("server closed the connection"))

    monkeypatch.setattr(submit, "store_submission", store_then_lose_the_database)
    cut = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(token))
    assert cut.status_code == 503 and cut.headers["retry-after"] == "5"
    assert cut.json() == {"detail": "the board's database did not answer (restarting?); try again in a few seconds "
                                    "(sending the same bundle again is safe: it stays one submission)"}
    (stuck,) = service.submissions_of()
    assert stuck["state"] == "received" and service.queue() == []
    monkeypatch.setattr(submit, "store_submission", store)
    again = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(token))
    assert again.status_code == 200 and again.json()["id"] == stuck["id"] and again.json()["state"] == "queued"
    assert [e["state"] for e in again.json()["events"]] == ["received", "accepted", "queued"]
    assert len(list((service.boards / "test-pinned" / "submissions").glob("*/*"))) == 1 and len(service.queue()) == 1
    third = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(token))
    assert third.status_code == 200 and [e["state"] for e in third.json()["events"]] == ["received", "accepted",
                                                                                         "queued"]


def test_another_bundle_in_the_stored_folder_is_not_adopted(tmp_path: Path, service: Service, client: Any,
                                                            bundles: dict[str, Path]) -> None:
    """Only the very files of the cut-off submission are taken over: the folder of a different bundle under the same
    model and revision leaves it rejected as a duplicate revision, as `submit` rejects it."""
    token = service.add_token("alice")
    first = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=auth(token)).json()
    other = tmp_path / "edited"
    shutil.copytree(bundles["a"], other)
    (other / "card.json").write_text((other / "card.json").read_text().replace("model A", "model A edited"))
    r = client.post("/api/submissions", content=tar_of(other), headers=auth(token))
    assert r.status_code == 201 and r.json()["id"] != first["id"] and r.json()["state"] == "rejected"
    assert "already on this board" in r.json()["reasons"][0]
