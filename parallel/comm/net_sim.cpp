// Parsing of --net-sim RATE,LATENCY (net_sim.hpp); the waiting itself is in Transport::exchange.
#include "parallel/comm/net_sim.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace dpx::parallel {

namespace {

struct Unit {
  const char* name;
  double scale;
};

// `text` as a positive finite number followed by one of `units`; the value times its scale.
double parse_quantity(std::string_view text, const Unit* units, size_t count, const char* flag,
                      const char* what, std::string_view whole) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' || ((text[i] == '-' || text[i] == '+') && i > 0 &&
                                                                  (text[i - 1] == 'e' || text[i - 1] == 'E'))))
    ++i;
  double value = 0;
  const auto r = std::from_chars(text.data(), text.data() + i, value);
  const std::string_view unit = text.substr(i);
  if (r.ec != std::errc() || r.ptr != text.data() + i || i == 0)
    usage_fail(flag, " '", whole, "': the ", what, " '", text, "' does not start with a number; write e.g. ",
               "10gbit,5us or 1GB,50us");
  for (size_t u = 0; u < count; ++u)
    if (unit == units[u].name) {
      if (!(value > 0) || !std::isfinite(value))
        usage_fail(flag, " '", whole, "': the ", what, " must be a positive number, not ", text);
      return value * units[u].scale;
    }
  std::string names;
  for (size_t u = 0; u < count; ++u) names += std::string(u ? ", " : "") + units[u].name;
  usage_fail(flag, " '", whole, "': the ", what, " '", text, "' needs one of the units ", names);
}

}  // namespace

NetSim parse_net_sim(std::string_view text, const char* flag) {
  if (text.empty() || text == "off") return {};
  const size_t comma = text.find(',');
  if (comma == std::string_view::npos || text.find(',', comma + 1) != std::string_view::npos)
    usage_fail(flag, " '", text, "': write RATE,LATENCY, e.g. 10gbit,5us (a link of 10 Gbit/s with 5 us latency)");
  static const Unit kRates[] = {{"bit", 1.0 / 8},  {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8},
                                {"tbit", 1e12 / 8}, {"B", 1},          {"kB", 1e3},      {"MB", 1e6},
                                {"GB", 1e9},        {"TB", 1e12}};
  static const Unit kTimes[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  NetSim n;
  n.bytes_per_s = parse_quantity(text.substr(0, comma), kRates, std::size(kRates), flag, "rate", text);
  n.latency_s = parse_quantity(text.substr(comma + 1), kTimes, std::size(kTimes), flag, "latency", text);
  return n;
}

std::string NetSim::str() const {
  if (!enabled()) return "off";
  char line[96];
  std::snprintf(line, sizeof line, "%g Gbit/s (%g GB/s), %g us", bytes_per_s * 8 / 1e9, bytes_per_s / 1e9,
                latency_s * 1e6);
  return line;
}

}  // namespace dpx::parallel
