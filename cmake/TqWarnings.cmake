# tq_target_warnings(target): -Wall -Wextra -Werror on the project's own code only
# (third-party headers come in as SYSTEM includes and are not affected).
function(tq_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-psabi>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()

# tq_target_cpu_isa(target): vectorize CPU kernels for the build machine when TQ_NATIVE.
function(tq_target_cpu_isa target)
  if(TQ_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
