// Errors: every failure in dpx is an exception that says what was wrong and what to do.
// The CLI turns dpx::UsageError into exit code 2 and any other dpx::Error into exit code 1.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dpx {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bad command-line usage or an impossible configuration asked for by the user.
struct UsageError : Error {
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// At most `max_bytes` of untrusted text (a file's header, a name read from it) for a message,
// cut at a UTF-8 character boundary and marked "…": a hostile file must not make a message as
// large as itself.
inline std::string excerpt(std::string_view text, size_t max_bytes = 80) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;  // inside a character
  return std::string(text.substr(0, n)) + "…";
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

template <typename... Args>
[[noreturn]] void usage_fail(const Args&... args) {
  throw UsageError(detail::concat(args...));
}

}  // namespace dpx

// DPX_CHECK(cond, message parts...) throws dpx::Error naming the failed condition and file:line.
#define DPX_CHECK(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::dpx::fail(__VA_ARGS__, " [check '" #cond "' failed at ", __FILE__, ":", __LINE__, "]"); \
  } while (0)
