// The vector versions of expf and erff in glibc's libmvec (libm.so pulls it in as needed; at most
// 4 ulp from the exact value, 16 lanes at a time on AVX-512): an `omp simd` loop that calls them
// calls the vector versions. <math.h> declares them so only under -ffast-math, which dpx does not
// use. Included by the kernels that vectorise exp or erf (smooth_activation.cpp, softmax.cpp).
#pragma once
#include <cmath>

extern "C" {
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
}
