// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
#pragma once

namespace coda_core {

// Version of the C++ core, reported by coda_core_cpp.version().
const char* version();

}  // namespace coda_core
