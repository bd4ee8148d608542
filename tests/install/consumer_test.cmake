# Proves the installed package works for an outside project: cmake --install into a scratch prefix,
# then configure, build and run examples/consumer with find_package(mantissa) against that prefix.
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
if(NOT step_output MATCHES "bf16\\(3.14159274\\) = 3.140625 \\(0x4049\\)" OR NOT step_output MATCHES "mixed precision: loss")
  message(FATAL_ERROR "unexpected output from the consumer:\n${step_output}")
endif()
message(STATUS "consumer output: ${step_output}")
