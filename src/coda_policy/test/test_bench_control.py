# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""``coda bench control`` end to end over DDS (tiny settings), and the compiled action means it relies on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from coda_policy.action_mean import compiled_action_mean, numpy_action_mean
from coda_policy.bench_control import ControlBenchConfig, main
from coda_policy.control import ControlConfig, LoadedPolicy, ObjectInfo, PolicyController
from coda_policy.sft import build_policy

KEYS = (
    "latency_us_p50",
    "latency_us_p99",
    "misses_100hz",
    "misses_500hz",
    "ratio_to_rclpy_relay_p50",
    "ticks",
    "paths",
    "relays",
    "load_avg",
    "action_mean_us_cpp",
    "action_mean_us_numpy",
)


@pytest.mark.ros
def test_bench_runs_the_policy_network_over_dds(ros_domain):
    cmd = [sys.executable, "-m", "coda_policy.bench_control", "--ticks", "200", "--seconds", "2", "--json"]
    # Own process group: on a timeout the benchmark, its policy node and its relay are all killed.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=dict(os.environ)
    )
    try:
        out, err = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"coda bench control did not finish; stderr:\n{err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert all(key in result for key in KEYS), result
    assert result["default_path"] == "cpp" and set(result["paths"]) == {"cpp", "python"}
    for path, figures in result["paths"].items():
        assert figures["ticks_sent"] == 200, path
        assert figures["ticks"] > 100, path  # answered by commands that ran the network
        assert figures["hold_fraction"] < 1.0, path
        assert figures["ticks_100hz"] == 200 and figures["ticks_500hz"] == 1000, path
        assert 0 <= figures["misses_100hz"] <= 200 and 0 <= figures["misses_500hz"] <= 1000, path
        assert 0 < figures["latency_us_p50"] <= figures["latency_us_p99"], path
    assert (result["latency_us_p50"], result["misses_500hz"]) == (
        result["paths"]["cpp"]["latency_us_p50"], result["paths"]["cpp"]["misses_500hz"])
    for name in ("rclpy", "rcl"):
        relay = result["relays"][name]
        assert 0 < relay["latency_us_p50"] <= relay["latency_us_p99"], name
    floor = result["relays"]["rcl"]
    assert floor["ticks_100hz"] == 200 and floor["ticks_500hz"] == 1000
    assert 0 <= floor["misses_100hz"] <= 200 and 0 <= floor["misses_500hz"] <= 1000
    assert result["ratio_to_rclpy_relay_p50"] == pytest.approx(
        result["latency_us_p50"] / result["relays"]["rclpy"]["latency_us_p50"], abs=1e-3)
    assert result["action_mean_us_cpp"] > 0 and result["action_mean_us_numpy"] > 0
    assert len(result["load_avg"]["start"]) == 3 and len(result["load_avg"]["end"]) == 3
    assert set(result["targets_met"]) == {"latency_us_p50", "latency_us_p99", "ratio_to_rclpy_relay_p50",
                                          "misses_100hz", "misses_500hz"}


def test_numpy_action_mean_equals_the_network(tiny_policy_config):
    net = build_policy(tiny_policy_config, 5).net.eval()
    embedding = torch.from_numpy(np.random.default_rng(3).normal(size=(1, 384)).astype(np.float32))
    fast = numpy_action_mean(net, embedding)
    rng = np.random.default_rng(4)
    cfg = net.cfg
    present_cols = [cfg.layout[f"obj{k}_present"][0] for k in range(cfg.max_objects)]
    for count in range(1, cfg.max_objects + 1):
        obs = rng.uniform(-1.0, 1.0, cfg.obs_dim).astype(np.float32)
        obs[present_cols] = (np.arange(cfg.max_objects) < count).astype(np.float32)
        obs[cfg.layout["stage_index"][0]] = count - 1
        with torch.no_grad():
            expected = net(torch.from_numpy(obs)[None], embedding)[0][0].numpy()
        np.testing.assert_allclose(fast(obs), expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="embedding shape"):
        numpy_action_mean(net, embedding[:, :10])


def test_cpp_action_mean_equals_the_network_and_checks_its_spec(tiny_policy_config):
    from coda_core_cpp import ObjectTokenActor

    net = build_policy(tiny_policy_config, 6).net.eval()
    embedding = torch.from_numpy(np.random.default_rng(5).normal(size=(1, 384)).astype(np.float32))
    fast, backend, note = compiled_action_mean(net, embedding)
    assert (backend, note) == ("cpp", "") and isinstance(fast, ObjectTokenActor)
    cfg = net.cfg
    present_cols = [cfg.layout[f"obj{k}_present"][0] for k in range(cfg.max_objects)]
    rng = np.random.default_rng(7)
    for trial in range(3 * cfg.max_objects):
        obs = rng.uniform(-1.0, 1.0, cfg.obs_dim).astype(np.float32)
        obs[present_cols] = (rng.permutation(cfg.max_objects) < 1 + trial % cfg.max_objects).astype(np.float32)
        obs[cfg.layout["stage_index"][0]] = trial % (cfg.max_stages + 2)
        with torch.no_grad():
            expected = net(torch.from_numpy(obs)[None], embedding)[0][0].numpy()
        np.testing.assert_allclose(fast(obs), expected, atol=1e-5, rtol=1e-4)
    obs[present_cols] = 0.0  # nothing to attend to: NaN, which the controller turns into a hold
    assert np.isnan(fast(obs)).all()
    with pytest.raises(ValueError, match=r"obs: expected shape"):
        fast(obs[:-1])
    spec = numpy_action_mean(net, embedding).spec()
    spec["head"] = spec["head"][1:]
    with pytest.raises(ValueError, match=r"ActorSpec\.head\[0\]\.in"):
        ObjectTokenActor(spec)
    with pytest.raises(ValueError, match=r"blocks\[0\]: expected a dict"):
        ObjectTokenActor({**spec, "blocks": [42]})
    del spec["lang"]
    with pytest.raises(ValueError, match="missing key 'lang'"):
        ObjectTokenActor(spec)


def test_controller_commands_are_the_same_compiled_or_eager(tiny_policy_config):
    net = build_policy(tiny_policy_config, 4).net.eval()
    embedding = np.random.default_rng(2).normal(size=384).astype(np.float32)
    objects = [
        ObjectInfo((0.5, 0.05, 0.42), (0.9, 0.1, 0.1), 0, (0.02, 0.02, 0.02), 1),
        ObjectInfo((0.45, -0.1, 0.425), (0.1, 0.1, 0.9), 2, (0.025, 0.025, 0.025), 0),
    ]
    commands = {}
    for compiled in (True, False):
        controller = PolicyController(ControlConfig(use_compiled=compiled))
        controller.swap(LoadedPolicy("v1", net))
        controller.set_instruction("touch the red cube", embedding)
        assert controller.compiled is compiled and controller.compile_error == ""
        assert controller.backend == ("cpp" if compiled else "eager")
        commands[compiled] = []
        for k in range(5):
            controller.set_arm(1.0 + 0.1 * k, np.array([0.4 + 0.01 * k, 0.0, 0.6]), 0.08)
            controller.set_objects(1.0 + 0.1 * k, objects)
            commands[compiled].append(controller.tick(1.05 + 0.1 * k))
    for fast, eager in zip(commands[True], commands[False], strict=True):
        assert not fast.hold and not eager.hold
        np.testing.assert_allclose(fast.delta, eager.delta, atol=1e-6)
        assert fast.gripper == pytest.approx(eager.gripper, abs=1e-5) and fast.stage == eager.stage


def test_bad_settings_name_the_option():
    with pytest.raises(SystemExit) as exc:
        main(["--ticks", "5"])
    assert exc.value.code == 2
    with pytest.raises(ValueError, match=r"ControlBenchConfig\.executor"):
        ControlBenchConfig(executor="multi")
