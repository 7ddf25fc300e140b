# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""sensor_msgs/Image <-> numpy, for the encodings the loop uses (rgb8, bgr8, mono8)."""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import Image

CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1}


class ImageError(ValueError):
    """An image message that cannot be decoded; the message names the problem."""


def image_to_msg(rgb: np.ndarray, frame_id: str = "scene_camera") -> Image:
    """Pack an (H, W, 3) uint8 RGB array into an rgb8 Image."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ImageError(f"expected an (H, W, 3) uint8 array, got {rgb.dtype} {rgb.shape}")
    msg = Image()
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(rgb.shape[0]), int(rgb.shape[1])
    msg.encoding = "rgb8"
    msg.is_bigendian = 0
    msg.step = msg.width * 3
    msg.data = np.ascontiguousarray(rgb).tobytes()
    return msg


def msg_to_image(msg: Image) -> np.ndarray:
    """Decode an rgb8/bgr8/mono8 Image into an (H, W, 3) uint8 RGB array; raise ImageError on bad input."""
    if msg.encoding not in CHANNELS:
        raise ImageError(f"unsupported image encoding {msg.encoding!r} (supported: {sorted(CHANNELS)})")
    channels = CHANNELS[msg.encoding]
    if msg.height == 0 or msg.width == 0:
        raise ImageError(f"empty image ({msg.width}x{msg.height})")
    if msg.step < msg.width * channels:
        raise ImageError(f"step {msg.step} is smaller than width {msg.width} x {channels} channels")
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if data.size != msg.step * msg.height:
        raise ImageError(f"data holds {data.size} bytes, expected step {msg.step} x height {msg.height}")
    rows = data.reshape(msg.height, msg.step)[:, : msg.width * channels]
    image = rows.reshape(msg.height, msg.width, channels)
    if msg.encoding == "bgr8":
        image = image[:, :, ::-1]
    elif msg.encoding == "mono8":
        image = np.repeat(image, 3, axis=2)
    return np.ascontiguousarray(image)
