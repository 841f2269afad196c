// Options that take one of a few names, as enums: one table of (value, name) rows per option,
// from which parsing (once, where the text comes in: the command line), printing (config.json,
// the start-up agreement, the config box) and the list in --help and in errors all follow.
//   inline constexpr Choices<Precision, 4> kPrecisions = {{{Precision::fp32, "fp32"}, ...}};
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace dpx {

template <typename E>
struct Choice {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
using Choices = std::array<Choice<E>, N>;

// The name of `value` ("?" for a value the table lacks).
template <typename E, size_t N>
std::string_view choice_name(const Choices<E, N>& table, E value) {
  for (const Choice<E>& c : table)
    if (c.value == value) return c.name;
  return "?";
}

// "a, b or c".
template <typename E, size_t N>
std::string choice_list(const Choices<E, N>& table) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += detail::concat(i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
  return s;
}

// The value named `text`; otherwise throws UsageError "<flag>: unknown <what> '<text>': use a, b or c".
template <typename E, size_t N>
E parse_choice(const Choices<E, N>& table, std::string_view text, std::string_view flag, std::string_view what) {
  for (const Choice<E>& c : table)
    if (c.name == text) return c.value;
  usage_fail(flag, ": unknown ", what, " '", text, "': use ", choice_list(table));
}

// What `parse` returns; a UsageError it throws is thrown again with `flag` in front.
template <typename F>
auto with_flag(std::string_view flag, F parse) {
  try {
    return parse();
  } catch (const UsageError& e) {
    usage_fail(flag, ": ", e.what());
  }
}

}  // namespace dpx
