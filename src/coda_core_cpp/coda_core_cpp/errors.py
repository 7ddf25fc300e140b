# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""The exception raised for problems in a staged-potential program (by C++ and by the reference)."""

from __future__ import annotations


class PotentialError(ValueError):
    """A compile error in a potential program, with its 1-based line and byte column.

    ``str(error)`` reads ``line L, column C: <message>``; ``message`` names the problem
    (unknown name, type mismatch, syntax, a limit exceeded).
    """

    def __init__(self, message: str, line: int, column: int) -> None:
        """Record the problem and where it is."""
        super().__init__(f"line {line}, column {column}: {message}")
        self.message = message
        self.line = line
        self.column = column

    def __reduce__(self) -> tuple[type[PotentialError], tuple[str, int, int]]:
        """Pickle with the constructor's arguments (for multiprocessing)."""
        return (PotentialError, (self.message, self.line, self.column))
