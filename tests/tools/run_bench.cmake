# run_bench.cmake: the start every strata-bench check script shares.
#   include("${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake")
#   run_bench(<json file> <timeout s> <subcommand> [args...])
# runs `${BENCH} <subcommand> args... --json <json file>` (the file removed first), fails the
# check with the bench's output unless it exits 0, and sets `doc` (the JSON) and `out` (its
# standard output) in the caller's scope. Empty arguments are dropped by CMake on the way: pass
# none.
function(run_bench json timeout subcommand)
  file(REMOVE "${json}")
  execute_process(
    COMMAND "${BENCH}" ${subcommand} ${ARGN} --json "${json}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr TIMEOUT ${timeout})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "strata-bench ${subcommand} exited with ${rc}\n${stdout}\n${stderr}")
  endif()
  file(READ "${json}" json_text)
  set(doc "${json_text}" PARENT_SCOPE)
  set(out "${stdout}" PARENT_SCOPE)
endfunction()
