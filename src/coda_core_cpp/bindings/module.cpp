// Copyright 2026 The CoDA for ROS 2 Authors
// SPDX-License-Identifier: Apache-2.0
// The only binding file of coda_core_cpp: .def calls, no logic.
#include <pybind11/pybind11.h>

#include "coda_core/version.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "CoDA core hot paths (C++17)";
  m.def("version", &coda_core::version, "Version of the C++ core.");
}
