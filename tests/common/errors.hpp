// What the tests ask of an error: the message of the dpx::Error a call throws, and whether a
// message names what it should.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "core/error.hpp"

namespace dpx::testing {

// The message of the dpx::Error that f throws; a failed check, and "", when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dpx::Error& e) {
    return e.what();
  }
  FAIL_CHECK("no dpx::Error thrown");
  return "";
}

// The message of the dpx::UsageError that f throws, or "" when it throws none (a check that a
// configuration is accepted compares it with "").
template <typename F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const dpx::UsageError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace dpx::testing
