# tq_target_warnings(target): -Wall -Wextra -Werror on the project's own code only
# (third-party headers come in as SYSTEM includes and are not affected).
function(tq_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-psabi>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
  # GCC 12 at -O2/-O3 reports -Wrestrict inside libstdc++'s std::string for
  # plain concatenations such as "a" + std::to_string(i) (GCC bug 105329), a
  # false positive in a system header; keep it a warning-free build there.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
  # The clang fuzz build (TQ_FUZZ) reports clang's warnings without failing:
  # -Werror is the GCC build's gate, the fuzz build only has to run.
  if(TQ_FUZZ)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error>)
  endif()
endfunction()

# tq_target_cpu_isa(target): vectorize CPU kernels for the build machine when TQ_NATIVE.
function(tq_target_cpu_isa target)
  if(TQ_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
