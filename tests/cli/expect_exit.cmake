# Runs CMD (a ;-list) and passes when it exits with status EXIT (a number: a signal is never a pass)
# and its output matches REGEX: a bad option, an unusable model or a failed allocation ends with a
# message and a status, never a crash.
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT "${rc}" STREQUAL "${EXIT}")
  message(FATAL_ERROR "expected exit status ${EXIT}, got '${rc}'")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'")
endif()
