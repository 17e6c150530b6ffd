# cmake -DGEN=<chainfd-gen-showcase> -DOUT=<dir> -DSCENES=<scenes dir> -P showcase_current.cmake
# The committed scenes/showcase_*.xml are exactly what viewer/gen_showcase.c writes.
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${GEN}" "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "chainfd-gen-showcase failed (${rc})")
endif()
file(GLOB made RELATIVE "${OUT}" "${OUT}/showcase_*.xml")
file(GLOB committed RELATIVE "${SCENES}" "${SCENES}/showcase_*.xml")
if(NOT made STREQUAL committed)
  message(FATAL_ERROR "generated files (${made}) differ from scenes/ (${committed})")
endif()
foreach(f ${made})
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${OUT}/${f}" "${SCENES}/${f}"
                  RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "scenes/${f} is not what gen_showcase.c writes: run "
                        "chainfd-gen-showcase scenes (from the build's viewer/ directory)")
  endif()
endforeach()
message("${made}: up to date")
