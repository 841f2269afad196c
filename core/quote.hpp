// Names and text from others (folder and file names, CSV fields, command lines) as they may be
// written into a script: every byte that could end a string, a line or a comment is escaped.
// The rule of docs/troubleshooting.md: nothing of another's file reaches gnuplot or a
// shell unescaped.
#pragma once
#include <string>
#include <string_view>

namespace dpx {

// True for the bytes that end or bend a line: ASCII control characters (NUL, tab, LF, CR, ESC ...)
// and DEL.
inline bool is_control(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

// `s` with each control character written visibly (\n, \r, \t, \xNN) and every other byte kept:
// one line of text that can stand in a comment or a label. A backslash stays a backslash, so the
// result is for reading, not for decoding.
inline std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (!is_control(c)) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      const auto u = static_cast<unsigned char>(c);
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// A word for a POSIX shell: bare when made only of characters no shell treats specially, else in
// single quotes with each ' written as '\'' (nothing is special inside single quotes; a newline
// stays inside the word).
inline std::string shell_quote(std::string_view word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                              "@%+=:,./-_") == std::string_view::npos)
    return std::string(word);
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace dpx
