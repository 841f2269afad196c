// doctest's main for the GPU suite: exits 77 (ctest: skipped) when no CUDA device is present,
// except when only listing test cases.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "core/cuda/memory.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strstr(argv[i], "list-test-cases") || std::strstr(argv[i], "-ltc")) listing = true;
  if (!listing && !dpx::cuda::available()) {
    std::printf("no CUDA device present: GPU tests skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
