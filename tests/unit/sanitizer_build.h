// Whether this test binary is built with a sanitizer (ASan/UBSan or TSan,
// ~15x slower). Long quality cases then run only in the Release run (or on
// fewer inputs), where their bounds are asserted; the sanitizer run still
// covers the same code through the quicker cases.
#pragma once

namespace tq {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

}  // namespace tq
