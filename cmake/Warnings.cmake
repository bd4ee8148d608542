# One place for the warning flags every mantissa target uses; MANTISSA_WERROR turns them into errors
# (the test build, and so CI, always sets it).
add_library(mantissa_warnings INTERFACE)
target_compile_options(mantissa_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor
  $<$<BOOL:${MANTISSA_WERROR}>:-Werror>)
