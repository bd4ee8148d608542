# One place for the warning flags every mantissa target uses; MANTISSA_WERROR turns them into errors
# (the test build, and so CI, always sets it).
add_library(mantissa_warnings INTERFACE)
# CUDA sources (nvcc) get nvcc's own warnings and the host compiler's -Wall -Wextra on the host code.
target_compile_options(mantissa_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${MANTISSA_WERROR}>>:-Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${MANTISSA_WERROR}>>:-Werror=all-warnings>)
