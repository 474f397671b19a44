// <immintrin.h> for the CPU kernels' intrinsic paths. GCC 12's AVX-512
// headers build unmasked conversions from a self-initialized
// _mm512_undefined_*() value, which -Wmaybe-uninitialized reports (a false
// positive inside the system header); silence it for the
// header only. The pragmas act only if this is the translation unit's first
// inclusion of <immintrin.h> (a later one is a no-op): the standard headers
// the kernels use do not include it, and a violation shows as that warning.
#pragma once

#if defined(__SSE2__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
