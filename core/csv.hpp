// One field of a CSV line as dpx writes them: as it is when it holds no comma, double quote, CR or
// LF, else in double quotes with each quote doubled (RFC 4180). Only free text needs it (a
// --devices list such as cuda:0,cuda:1); analysis::CsvTable reads it back.
#pragma once
#include <string>
#include <string_view>

namespace dpx {

inline std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace dpx
