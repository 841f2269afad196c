// The headers nearly every test file includes, compiled once per test executable (CMake's
// target_precompile_headers, tests/CMakeLists.txt) instead of once per file: parsing them was
// most of a test file's compile time, and CI builds the suite twice (scripts/test, .ci/run).
// Only headers that define nothing a test could collide with belong here.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "layers/layers.hpp"
#include "tests/common/tensors.hpp"
