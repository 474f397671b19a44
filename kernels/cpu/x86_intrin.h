// <immintrin.h> for the CPU kernels' intrinsic paths. GCC 12's AVX-512
// headers build unmasked conversions from a self-initialized
// _mm512_undefined_*() value, which -Wmaybe-uninitialized reports (a false
// positive inside the system header, GCC bug 105593); silence it for the
// header only. Include this before any other header that may pull in
// <immintrin.h>.
#pragma once

#if defined(__SSE2__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
