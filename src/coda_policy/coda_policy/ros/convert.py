# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The only module of coda_policy that imports both message types and the controller's domain types."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from builtin_interfaces.msg import Time

from coda_engine.real.robot import gripper_to_message
from coda_msgs.msg import ArmCommand, ObjectStates
from coda_policy.control import Command, ObjectInfo


def stamp_seconds(stamp: Time) -> float:
    """Convert a header stamp to seconds."""
    return float(stamp.sec) + 1e-9 * float(stamp.nanosec)


def objects_from_msg(msg: ObjectStates) -> list[ObjectInfo]:
    """Return the visible objects of an ObjectStates message."""
    return [ObjectInfo((o.pose.position.x, o.pose.position.y, o.pose.position.z), (o.rgba.r, o.rgba.g, o.rgba.b),
                       int(o.shape), (o.size.x, o.size.y, o.size.z), int(o.role))
            for o in msg.objects if o.visible]


def command_to_msg(cmd: Command, stamp: Time) -> ArmCommand:
    """Convert a controller command to ArmCommand (gripper < 0 closes there: ``gripper_to_message``)."""
    return fill_command_msg(ArmCommand(), cmd, stamp)


def fill_command_msg(msg: ArmCommand, cmd: Command, stamp: Time) -> ArmCommand:
    """Write a controller command into ``msg`` (reused from tick to tick by the node) and return it."""
    msg.header.stamp = stamp
    msg.header.frame_id = "world"
    msg.policy_version = cmd.version
    msg.policy_sha256 = cmd.sha256
    delta = cmd.delta.tolist()
    msg.delta.x, msg.delta.y, msg.delta.z = float(delta[0]), float(delta[1]), float(delta[2])
    msg.gripper = gripper_to_message(cmd.gripper)
    msg.hold = bool(cmd.hold)
    msg.hold_reason = cmd.reason
    msg.stage = int(cmd.stage)
    return msg


def checkpoint_folder(uri: str, checkpoint_root: str) -> Path:
    """``file://`` URI or path of a PolicyVersion; relative paths are taken under ``checkpoint_root``."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"checkpoint_uri {uri!r}: only file:// URIs and paths are supported")
    path = Path(unquote(parsed.path if parsed.scheme else uri))
    return path if path.is_absolute() else Path(checkpoint_root) / path
