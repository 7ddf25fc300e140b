# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Two processes on one isolated ROS domain: every coda_msgs type published by one arrives intact in the other."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from coda_engine.ros.dds_check import run_two_processes
from coda_engine.ros.interface_samples import all_message_types

pytestmark = pytest.mark.ros


def test_every_type_crosses_dds_intact(ros_domain: int) -> None:
    report = run_two_processes(timeout=60.0)
    assert report.domain_id == ros_domain
    assert report.types_expected == len(all_message_types())
    assert report.missing == []
    assert report.mismatched == []
    assert report.ok


def test_scene_spec_between_two_plain_rclpy_processes(ros_domain: int) -> None:
    """A SceneSpec published by one bare rclpy process is received by another."""
    publisher = textwrap.dedent(
        """
        import time, rclpy
        from coda_msgs.msg import SceneSpec, ObjectState
        from rclpy.qos import QoSProfile, DurabilityPolicy
        rclpy.init()
        node = rclpy.create_node("scene_pub")
        qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        pub = node.create_publisher(SceneSpec, "scene_specs", qos)
        msg = SceneSpec(scene_id="s-1", family="reach", instruction="touch the red cube", seed=7,
                        objects=[ObjectState(name="red_cube", shape=ObjectState.SHAPE_BOX, mass=0.1)])
        pub.publish(msg)
        end = time.monotonic() + 20
        while time.monotonic() < end and pub.get_subscription_count() == 0:
            rclpy.spin_once(node, timeout_sec=0.05)
        end = time.monotonic() + 2
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        """
    )
    subscriber = textwrap.dedent(
        """
        import time, rclpy
        from coda_msgs.msg import SceneSpec
        from rclpy.qos import QoSProfile, DurabilityPolicy
        rclpy.init()
        node = rclpy.create_node("scene_sub")
        got = []
        qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(SceneSpec, "scene_specs", got.append, qos)
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.05)
        m = got[0]
        print(m.scene_id, m.family, m.seed, m.objects[0].name, round(m.objects[0].mass, 3))
        """
    )
    env = dict(os.environ)
    sub = subprocess.Popen(
        [sys.executable, "-c", subscriber], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pub = subprocess.Popen([sys.executable, "-c", publisher], env=env)
    out, err = sub.communicate(timeout=60)
    pub.wait(timeout=60)
    assert sub.returncode == 0, err
    assert out.split() == ["s-1", "reach", "7", "red_cube", "0.1"]


def test_other_domain_does_not_see_the_traffic(ros_domain: int) -> None:
    """Isolation: a receiver on another domain id gets nothing from this domain's publisher.

    No fixed receive window: the receiver on the other domain (in this process) listens from before the publisher
    starts until it has left, and a receiver on this domain, started after it, gets every type in that time (the
    control: the traffic was there to be seen; the samples are latched, so a receiver that ever saw the publisher
    gets them). A receiver on the publisher's own domain in place of the other one would hear every type.
    """
    import json
    import time

    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from coda_engine.ros.dds_check import _qos, _topic

    context = Context()
    rclpy.init(context=context, domain_id=(ros_domain % 100) + 101)
    node = rclpy.create_node("isolation_probe", context=context)
    heard: list[str] = []
    for key, msg_type in all_message_types().items():
        node.create_subscription(msg_type, _topic(key), lambda _msg, key=key: heard.append(key), _qos())
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    cmd = [sys.executable, "-m", "coda_engine.ros.dds_check"]
    started: list[subprocess.Popen] = []
    try:
        control = subprocess.Popen([*cmd, "receive", "--timeout", "60"], stdout=subprocess.PIPE, text=True)
        started.append(control)
        publisher = subprocess.Popen([*cmd, "publish", "--timeout", "60"], stdout=subprocess.DEVNULL)
        started.append(publisher)
        deadline = time.monotonic() + 120  # a condition wait: both leave when the exchange is done
        while control.poll() is None or publisher.poll() is None:
            assert time.monotonic() < deadline, "the exchange on this domain did not end"
            executor.spin_once(timeout_sec=0.05)
        out = control.stdout.read()
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        executor.remove_node(node)
        node.destroy_node()
        rclpy.shutdown(context=context)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["types_received"] == len(all_message_types()) and publisher.returncode == 0, report  # the control
    assert heard == []


def test_both_sides_take_the_ros_arguments_launch_gives(ros_domain: int, rclpy_node) -> None:
    """``ros2 launch`` appends ``--ros-args -r __node:=<name>``: the check runs, under the names given."""
    import json
    import time

    cmd = [sys.executable, "-m", "coda_engine.ros.dds_check"]
    receiver = subprocess.Popen([*cmd, "receive", "--timeout", "60", "--ros-args", "-r", "__node:=lab_receiver"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while ("lab_receiver", "/") not in rclpy_node.get_node_names_and_namespaces():
            assert time.monotonic() < deadline and receiver.poll() is None, receiver.stderr.read()[-2000:]
            time.sleep(0.1)
        publisher = subprocess.Popen([*cmd, "publish", "--timeout", "60", "--ros-args", "-r",
                                      "__node:=lab_publisher"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        out, err = receiver.communicate(timeout=90)
        _, publisher_err = publisher.communicate(timeout=90)
    finally:
        receiver.kill()
    assert receiver.returncode == 0 and publisher.returncode == 0, err[-2000:] + publisher_err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["types_received"] == len(all_message_types())
