# Runs COMMAND (a ;-list) and writes its standard output to OUT; fails the build when the
# command fails or prints nothing.
execute_process(COMMAND ${COMMAND} OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMMAND} failed (${rc})")
endif()
file(SIZE ${OUT}.tmp size)
if(size EQUAL 0)
  message(FATAL_ERROR "${COMMAND} printed nothing")
endif()
file(RENAME ${OUT}.tmp ${OUT})
