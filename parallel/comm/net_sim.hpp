// A network you can dial in (--net-sim RATE,LATENCY): every point-to-point exchange of a
// transport takes at least latency + bytes / rate, really waiting, so that DDP's overlap, bucket
// sizes, accumulation and the collective algorithms behave as they would on that network while
// the computation stays real. The textbook alpha-beta cost of one message: alpha = latency,
// beta = 1 / rate.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace dpx::parallel {

struct NetSim {
  double bytes_per_s = 0;  // 0: no simulated network
  double latency_s = 0;

  bool enabled() const { return bytes_per_s > 0; }
  // The time one message of `bytes` takes on this network: latency + bytes / rate.
  double message_s(size_t bytes) const { return latency_s + static_cast<double>(bytes) / bytes_per_s; }
  // "10 Gbit/s, 5 us" for printing.
  std::string str() const;
};

// "RATE,LATENCY": RATE a number with a unit of bits per second (bit, kbit, mbit, gbit, tbit) or
// bytes per second (B, kB, MB, GB, TB; decimal), LATENCY a number with ns, us, ms or s. Examples:
// "10gbit,5us", "1GB,50us", "100mbit,1ms". "" (or "off") is no simulated network. Throws
// dpx::UsageError naming `flag` and what to write.
NetSim parse_net_sim(std::string_view text, const char* flag);

}  // namespace dpx::parallel
