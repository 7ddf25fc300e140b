# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Trainer state beside a checkpoint: stored without pickle, read back exactly, pickles refused unread."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from coda_policy.checkpoint import (
    LEGACY_TRAINER_FILE,
    TRAINER_JSON,
    TRAINER_TENSORS,
    load_trainer_state,
    save_trainer_state,
)


def _adam_state() -> dict:
    """Return a real optimiser state after two steps, a generator state and counters (what PPO saves)."""
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))]
    optimizer = torch.optim.Adam([{"params": params[:1], "lr": 1e-3}, {"params": params[1:], "lr": 3e-4}], eps=1e-5)
    for _ in range(2):
        optimizer.zero_grad()
        (params[0].sum() ** 2 + params[1].pow(3).sum()).backward()
        optimizer.step()
    return {"optimizer": optimizer.state_dict(), "generator": torch.Generator().manual_seed(7).get_state(),
            "env_steps": 4096, "update": 2}


def test_trainer_state_round_trips_and_resumes_an_optimizer(tmp_path: Path) -> None:
    state = _adam_state()
    save_trainer_state(tmp_path, state)
    assert sorted(p.name for p in tmp_path.iterdir()) == [TRAINER_JSON, TRAINER_TENSORS]
    back = load_trainer_state(tmp_path)
    assert back is not None and (back["env_steps"], back["update"]) == (4096, 2)
    assert torch.equal(back["generator"], state["generator"])
    assert back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]  # int keys, tuples kept
    for key, moments in state["optimizer"]["state"].items():
        for name, value in moments.items():
            assert torch.equal(back["optimizer"]["state"][key][name], value)
    params = [torch.nn.Parameter(torch.zeros(3, 2)), torch.nn.Parameter(torch.zeros(4))]
    optimizer = torch.optim.Adam([{"params": params[:1]}, {"params": params[1:]}])
    optimizer.load_state_dict(back["optimizer"])  # accepted by torch as it is
    assert optimizer.param_groups[1]["lr"] == 3e-4
    assert load_trainer_state(tmp_path / "absent") is None


class _Planted:
    """Unpickling this runs ``Path.touch`` on a marker file: what a hostile run folder would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_trainer_state_is_refused_unread(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    folder = tmp_path / "r003-rl"
    folder.mkdir()
    (folder / LEGACY_TRAINER_FILE).write_bytes(pickle.dumps({"optimizer": _Planted(marker)}))
    with pytest.raises(ValueError, match="pickled trainer state is not loaded"):
        load_trainer_state(folder)
    assert not marker.exists()
    pickle.loads((folder / LEGACY_TRAINER_FILE).read_bytes())  # the payload is live: loading it would have run it
    assert marker.exists()


@pytest.mark.parametrize("tree,message", [
    ({"state": {"dict": [["a", {"tensor": "/nope"}]]}}, "missing from"),
    ({"state": {"eval": "print(1)"}}, "malformed trainer state node"),
    ({"state": {"value": [1, 2]}}, "malformed trainer state node"),
    ({"state": {"list": [1, 2]}}, "malformed trainer state node"),
    ({"format": 99, "state": {"dict": []}}, "format 99"),
])
def test_malformed_trainer_state_is_refused(tmp_path: Path, tree: dict, message: str) -> None:
    save_trainer_state(tmp_path, {"update": 1})
    (tmp_path / TRAINER_JSON).write_text(json.dumps({"format": 1, **tree}))
    with pytest.raises(ValueError, match=message):
        load_trainer_state(tmp_path)


def test_unstorable_values_are_named(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="/extra: set cannot be stored without pickle"):
        save_trainer_state(tmp_path, {"extra": {1, 2}})
    (tmp_path / TRAINER_TENSORS).write_bytes(b"not a safetensors file")
    (tmp_path / TRAINER_JSON).write_text(json.dumps({"format": 1, "state": {"dict": []}}))
    with pytest.raises(ValueError, match="unreadable trainer state"):
        load_trainer_state(tmp_path)
