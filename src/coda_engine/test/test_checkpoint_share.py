# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Versions for machines without the run's disk: what is sent, how it is checked and cached (no ROS)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from coda_engine.checkpoint_share import (
    STALE_STAGING_S,
    CheckpointCache,
    CheckpointShareError,
    find_version,
    model_sha256,
    read_version,
)


def version(root: Path, name: str, model: bytes = b"weights", evaluation: bool = True) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(model)
    (folder / "config.json").write_text('{"d_model": 32}')
    (folder / "trainer_state.safetensors").write_bytes(b"optimizer")
    (folder / "metrics.jsonl").write_text("{}\n")
    if evaluation:
        (folder / "evaluation.json").write_text('{"per_split": {"id": 0.7}}')
    return hashlib.sha256(model).hexdigest()


def test_read_version_sends_what_loading_and_the_gate_need(tmp_path: Path) -> None:
    sha = version(tmp_path, "r001-rl")
    digest, files = read_version(tmp_path, "r001-rl")
    assert digest == sha == model_sha256(tmp_path / "r001-rl")
    assert list(files) == ["model.safetensors", "config.json", "evaluation.json"]
    assert files["model.safetensors"] == b"weights"
    assert read_version(tmp_path, "r001-rl", sha)[0] == sha
    version(tmp_path, "r000-sft", evaluation=False)
    assert list(read_version(tmp_path, "r000-sft")[1]) == ["model.safetensors", "config.json"]


@pytest.mark.parametrize("name,sha,fragment", [
    ("r009-rl", "", "no model.safetensors and config.json"),
    ("../r001-rl", "", "not a version id"),
    ("", "", "not a version id"),
    ("a/b", "", "not a version id"),
    ("r001-rl", "0" * 64, "not the 0000000000000000... asked for"),
    ("r001-rl", "XYZ", "not 64 lowercase hex digits"),
])
def test_read_version_refuses_with_the_reason(tmp_path: Path, name: str, sha: str, fragment: str) -> None:
    version(tmp_path, "r001-rl")
    with pytest.raises(CheckpointShareError, match=fragment.replace(".", r"\.")):
        read_version(tmp_path, name, sha)


def test_cache_checks_stores_whole_folders_and_keys_them_by_model_hash(tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    sha_a = version(run_a, "r001-rl", b"run a")
    sha_b = version(run_b, "r001-rl", b"run b")  # the same version id in another run
    cache = CheckpointCache(tmp_path / "cache")
    assert cache.find("r001-rl", sha_a) is None
    root_a = cache.store("r001-rl", sha_a, read_version(run_a, "r001-rl")[1])
    root_b = cache.store("r001-rl", "", read_version(run_b, "r001-rl")[1])  # no hash asked: the sender's
    assert root_a != root_b and root_a.name == sha_a[:16] and root_b.name == sha_b[:16]
    assert cache.find("r001-rl", sha_a) == root_a and cache.find("r001-rl", sha_b) == root_b
    assert (root_a / "r001-rl" / "model.safetensors").read_bytes() == b"run a"
    assert cache.store("r001-rl", sha_a, read_version(run_a, "r001-rl")[1]) == root_a  # already there
    assert not [p for p in root_a.iterdir() if p.name.startswith(".")], "a staging folder was left behind"

    files = read_version(run_a, "r001-rl")[1]
    with pytest.raises(CheckpointShareError, match="the model sent has sha256"):
        cache.store("r001-rl", sha_b, files)
    with pytest.raises(CheckpointShareError, match=r"lacks \['config.json'\]"):
        cache.store("r002-rl", "", {"model.safetensors": b"x"})
    with pytest.raises(CheckpointShareError, match="unexpected files"):
        cache.store("r002-rl", "", {**files, "../../etc/passwd": b"x"})
    # a damaged copy (model changed on disk) is not found, and storing again replaces it
    (root_a / "r001-rl" / "model.safetensors").write_bytes(b"damaged")
    assert cache.find("r001-rl", sha_a) is None
    assert cache.store("r001-rl", sha_a, files) == root_a and cache.find("r001-rl", sha_a) == root_a


def test_a_store_removes_staging_folders_left_by_a_killed_worker(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sha = version(run, "r001-rl", b"weights")
    cache = CheckpointCache(tmp_path / "cache")
    parent = cache.version_root(sha)
    stale, fresh = parent / ".r001-rl-killed", parent / ".r001-rl-storing"
    for folder in (stale, fresh):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")
    old = time.time() - STALE_STAGING_S - 60
    os.utime(stale, (old, old))
    assert cache.store("r001-rl", sha, read_version(run, "r001-rl")[1]) == parent
    assert not stale.exists(), "the killed worker's staging folder is still there"
    assert fresh.is_dir(), "a store in progress (recent staging folder) was removed"
    assert cache.find("r001-rl", sha) == parent


def test_find_version_prefers_the_local_folder_then_the_cache(tmp_path: Path) -> None:
    local, other = tmp_path / "local", tmp_path / "other"
    sha_local = version(local, "r001-rl", b"local")
    sha_other = version(other, "r001-rl", b"other")
    cache = CheckpointCache(tmp_path / "cache")
    assert find_version("r001-rl", sha_local, local, cache) == (local, "")
    assert find_version("r001-rl", "", local, cache) == (local, "")  # no hash asked: not checked
    root, why = find_version("r001-rl", sha_other, local, cache)  # the local folder holds another model
    assert root is None and sha_local[:16] in why and sha_other[:16] in why
    cached = cache.store("r001-rl", sha_other, read_version(other, "r001-rl")[1])
    assert find_version("r001-rl", sha_other, local, cache) == (cached, "")
    assert find_version("r005-rl", sha_other, None, cache) == (None, "this worker has no checkpoint_root")
    assert "no checkpoint folder" in find_version("r005-rl", "", local, cache)[1]


def test_workers_sharing_a_cache_store_the_same_version_at_once(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    sha = version(tmp_path / "run", "r001-rl", b"x" * 200_000)
    files = read_version(tmp_path / "run", "r001-rl")[1]
    cache = CheckpointCache(tmp_path / "cache")
    with ThreadPoolExecutor(8) as pool:
        roots = list(pool.map(lambda _: cache.store("r001-rl", sha, files), range(16)))
    assert set(roots) == {cache.version_root(sha)} and cache.find("r001-rl", sha) == roots[0]
    assert [p.name for p in roots[0].iterdir()] == ["r001-rl"], "staging folders were left behind"
