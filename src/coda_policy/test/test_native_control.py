# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The C++ control tick (``coda_core_cpp._rt.ControlTick``) against the Python path, without ROS.

The same recorded observations of a simulated Panda (joint positions, object states, NaN joints, stale and missing
inputs, a new instruction, a version swapped mid-stream) go through :class:`PolicyController` and through the C++
tick; every command must agree: hold and reason word for word, displacement and gripper to 1e-6, stage, version and
model hash. The same over DDS, node against node, is in ``test_policy_node.py``.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

from coda_engine.sim.arm import SimArm
from coda_engine.sim.generator import generate
from coda_engine.sim.scene import SceneParams
from coda_policy.control import (
    ControlConfig,
    LoadedPolicy,
    ObjectInfo,
    PandaKinematics,
    PolicyController,
    native_tick_spec,
)
from coda_policy.sft import build_policy

try:
    from coda_core_cpp import _rt
except ImportError as error:  # the build always makes _rt (rcl is required): not importing it is a broken build
    _rt = None
    RT_IMPORT_ERROR: str | None = f"{type(error).__name__}: {error}"
else:
    RT_IMPORT_ERROR = None


@pytest.fixture(autouse=True)
def _rt_imports() -> None:
    """Fail every test of the file, naming the error, when the C++ control module does not import."""
    if RT_IMPORT_ERROR is not None:
        pytest.fail(f"coda_core_cpp._rt does not import ({RT_IMPORT_ERROR}): coda_core_cpp is built with its rcl "
                    "parts or not at all, so this is a broken build (make setup rebuilds it)",
                    pytrace=False)


@dataclass
class Step:
    """One recorded input of the stream (what a node would receive), then one tick at ``now``."""

    kind: str
    """'joints', 'objects', 'instruction', 'swap' or 'tick'."""
    stamp: float = 0.0
    names: list[str] = field(default_factory=list)
    positions: list[float] = field(default_factory=list)
    objects: list[ObjectInfo] = field(default_factory=list)
    text: str = ""
    version: str = ""


def _objects(arm: SimArm) -> list[ObjectInfo]:
    return [ObjectInfo(tuple(map(float, o.position)), tuple(map(float, o.rgba[:3])), int(o.shape),
                       tuple(map(float, o.size)), int(o.role)) for o in arm.object_states()]


def record_stream(family: str = "pick_place", seed: int = 3, steps: int = 40) -> list[Step]:
    """Drive a simulated Panda with random actions and record what the policy node would see, with faults."""
    rng = np.random.default_rng(seed)
    arm = SimArm()
    arm.reset(generate(family, rng, SceneParams(num_distractors=(2, 2))))
    names = list(SimArm.joint_names)
    stream = [Step("tick", 0.0), Step("instruction", text="put the cube in the bin"), Step("tick", 0.1)]
    t = 1.0
    for k in range(steps):
        arm.step(np.concatenate([rng.uniform(-0.02, 0.02, 3), rng.uniform(-1, 1, 1)]))
        t += 0.1
        q = [float(x) for x in arm.joint_positions()]
        if k == 0:
            stream.append(Step("joints", t, names, q))
            stream.append(Step("tick", t + 0.01))  # waiting for object_states
        if k % 3 == 0:
            stream.append(Step("objects", t, objects=_objects(arm)))
        if k == 9:
            q[2] = math.nan  # a NaN joint: two ticks hold (the next one's velocity uses it)
        if k == 14:
            stream.append(Step("tick", t + 0.9))  # joint_states and object_states stale
        if k == 20:
            stream.append(Step("swap", version="v2"))  # a new version mid-stream
        if k == 27:
            stream.append(Step("instruction", text="pick up the red cube"))  # the task starts over
        if k == 31:
            shuffled = list(zip(names, q, strict=True))[::-1]  # a driver in another order
            stream.append(Step("joints", t, [n for n, _ in shuffled], [p for _, p in shuffled]))
        elif k == 33:
            stream.append(Step("joints", t, names[:-1], q[:-1]))  # a finger missing: ignored
        else:
            stream.append(Step("joints", t, names, q))
        stream.append(Step("tick", t + 0.01))
    return stream


def _embedding(text: str) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(text.encode()))
    return rng.normal(size=384).astype(np.float32)


def replay(stream: list[Step], versions: dict[str, LoadedPolicy], cfg: ControlConfig) -> tuple[list, list]:
    """Run the stream through the Python path and the C++ tick; return both command lists (as dicts)."""
    kinematics = PandaKinematics()
    controller = PolicyController(cfg)
    tick = _rt.ControlTick(native_tick_spec(cfg, controller.builder, kinematics))
    controller.swap(versions["v1"])
    tick.set_model(controller.native_model())
    python, native = [], []
    for step in stream:
        if step.kind == "joints":
            try:
                ee, opening = kinematics.forward(step.names, step.positions)
                controller.set_arm(step.stamp, ee, opening)
                python_ok = True
            except (KeyError, ValueError):
                python_ok = False
            assert (tick.set_joints(step.stamp, step.names, step.positions) == "") is python_ok
        elif step.kind == "objects":
            controller.set_objects(step.stamp, step.objects)
            tick.set_objects(step.stamp, [(o.position, o.rgb, o.shape, o.size, o.role) for o in step.objects])
        elif step.kind == "instruction":
            controller.set_instruction(step.text, _embedding(step.text))
            tick.set_model(controller.native_model())
        elif step.kind == "swap":
            controller.swap(versions[step.version])
            tick.set_model(controller.native_model())
        else:
            cmd = controller.tick(step.stamp)
            python.append({"delta": tuple(float(d) for d in cmd.delta), "gripper": float(cmd.gripper),
                           "hold": cmd.hold, "reason": cmd.reason, "stage": cmd.stage, "version": cmd.version,
                           "sha256": cmd.sha256})
            native.append(tick.tick(step.stamp))
    return python, native


def assert_same_commands(python: list[dict], native: list[dict]) -> None:
    assert len(python) == len(native)
    for i, (p, n) in enumerate(zip(python, native, strict=True)):
        where = f"command {i}: python {p} != C++ {n}"
        assert (p["hold"], p["reason"], p["stage"], p["version"], p["sha256"]) == \
               (n["hold"], n["reason"], n["stage"], n["version"], n["sha256"]), where
        np.testing.assert_allclose(n["delta"], p["delta"], atol=1e-6, rtol=0, err_msg=where)
        assert abs(n["gripper"] - p["gripper"]) <= 1e-6, where


@pytest.fixture(scope="module")
def versions(tiny_policy_config):
    return {name: LoadedPolicy(name, build_policy(tiny_policy_config, seed).net.eval(), f"{seed:064x}")
            for seed, name in ((0, "v1"), (1, "v2"))}


def test_the_cpp_tick_decides_as_the_python_path(versions):
    stream = record_stream()
    python, native = replay(stream, versions, ControlConfig(family="pick_place", max_delta=0.005))
    assert_same_commands(python, native)
    reasons = [c["reason"] for c in python]
    # the stream covers every kind of decision
    assert reasons[:2] == ["no instruction", "waiting for joint_states"]
    assert "waiting for object_states" in reasons
    assert reasons.count("non-finite input in the observation") == 2
    assert "joint_states stale: 1.000 s old > 0.5 s" in reasons
    ran = [c for c in python if not c["hold"]]
    assert len(ran) > 30 and {c["version"] for c in ran} == {"v1", "v2"}
    assert any(max(abs(d) for d in c["delta"]) == pytest.approx(0.005) for c in ran)  # clipped to max_delta
    assert {c["stage"] for c in python} >= {0}


def test_same_holds_without_a_cpp_action_mean(versions):
    """With compiled action means off the C++ tick has none: it holds and says why (the Python path runs eager)."""
    cfg = ControlConfig(family="pick_place", use_compiled=False)
    controller = PolicyController(cfg)
    controller.swap(versions["v1"])
    assert controller.native_model()["actor"] is None and controller.native_model()["unavailable"] == ""
    controller.set_instruction("touch the red cube", _embedding("x"))
    model = controller.native_model()
    assert model["actor"] is None and "use_compiled" in model["unavailable"]
    kinematics = PandaKinematics()
    tick = _rt.ControlTick(native_tick_spec(cfg, controller.builder, kinematics))
    tick.set_model(model)
    target = ObjectInfo((0.5, 0.0, 0.4), (1.0, 0.0, 0.0), 0, (0.02, 0.02, 0.02), 1)
    names, q = list(SimArm.joint_names), [0.0] * 9
    assert tick.set_joints(1.0, names, q) == ""
    tick.set_objects(1.0, [(target.position, target.rgb, target.shape, target.size, target.role)])
    controller.set_arm(1.0, *kinematics.forward(names, q))
    controller.set_objects(1.0, [target])
    held = tick.tick(1.0)
    assert held["hold"] and held["reason"] == model["unavailable"] and held["version"] == "v1"
    controller.set_instruction("touch the red cube", np.ones(10, dtype=np.float32))  # does not fit the network
    tick.set_model(controller.native_model())
    assert tick.tick(1.0)["reason"] == controller.tick(1.0).reason == "instruction embedding does not fit the policy"


def test_forward_kinematics_in_cpp_match_mujoco():
    kinematics = PandaKinematics()
    cfg = ControlConfig()
    controller = PolicyController(cfg)
    tick = _rt.ControlTick(native_tick_spec(cfg, controller.builder, kinematics))
    tick.set_model(controller.native_model())
    rng = np.random.default_rng(0)
    names = list(SimArm.joint_names)
    for k in range(50):
        q = rng.uniform(-2.5, 2.5, 9)
        q[7:] = rng.uniform(0.0, 0.04, 2)
        ee, opening = kinematics.forward(names, q)
        controller.set_arm(1.0, ee, opening)
        assert tick.set_joints(1.0, names, q.tolist()) == ""
        # the observation's first columns: the tool point and (column 6) the finger opening, float32
        obs = controller.builder.build(ee, opening, [])
        controller.builder.reset()
        tick.set_objects(1.0, [((0.5, 0.0, 0.4), (1.0, 0.0, 0.0), 0, (0.02, 0.02, 0.02), 1)])
        tick.set_model({"has_policy": True, "has_instruction": True, "instruction_fits": True, "episode": k + 1,
                        "version": "", "sha256": "", "net_max_delta": 0.05, "actor": None,
                        "unavailable": "kinematics only"})  # each tick a new task: no velocity
        tick.tick(1.0)
        native = tick.observation
        np.testing.assert_allclose(native[:3], obs[:3], atol=1e-6)
        assert native[6] == pytest.approx(obs[6], abs=1e-7)
    spec = kinematics.chain_spec()
    assert spec["num_q"] == 7 and sum(len(b["hinges"]) for b in spec["bodies"]) == 7


def test_bad_specs_name_what_is_wrong():
    cfg = ControlConfig()
    controller = PolicyController(cfg)
    spec = native_tick_spec(cfg, controller.builder, PandaKinematics())
    with pytest.raises(ValueError, match="missing key 'joint_names'"):
        _rt.ControlTick({k: v for k, v in spec.items() if k != "joint_names"})
    with pytest.raises(ValueError, match="7 arm and 2 finger joint names, got 8"):
        _rt.ControlTick({**spec, "joint_names": spec["joint_names"][:8]})
    tick = _rt.ControlTick(spec)
    with pytest.raises(ValueError, match="missing key 'episode'"):
        tick.set_model({k: v for k, v in controller.native_model().items() if k != "episode"})
