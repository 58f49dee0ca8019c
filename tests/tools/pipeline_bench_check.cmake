# pipeline_bench_check.cmake: runs `strata-bench pipeline` on a tiny pipeline and checks that it
# exits 0 and that its JSON has the benchmark's fields (structure only: the figures are timings).
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> -P pipeline_bench_check.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake")
run_bench("${JSON}" 240 pipeline --pp 2 --micro-batches 4 --schedules 1f1b --steps 4 --layers 2
          --width 32)

# Fails naming the path unless doc[path...] exists.
function(require)
  string(JSON value ERROR_VARIABLE error GET "${doc}" ${ARGN})
  if(error)
    message(FATAL_ERROR "JSON lacks ${ARGN}: ${error}")
  endif()
endfunction()

string(JSON benchmark GET "${doc}" benchmark)
if(NOT benchmark STREQUAL "pipeline")
  message(FATAL_ERROR "benchmark is \"${benchmark}\", not \"pipeline\"")
endif()
require(config pp)
require(config micro_batches)
require(config schedules)
foreach(key pp micro_batches schedule vpp measured_bubble simulated_bubble simulated_comm_bubble
            handoff_ms unforced_idle ratio textbook_bubble step_ms steps action_cv_pct)
  require(tables 0 rows 0 ${key})
endforeach()
foreach(rank 0 1)
  foreach(key pp_rank peak_saved_bytes theory_bytes peak_live sim_peak_live)
    require(tables 1 rows ${rank} ${key})
  endforeach()
endforeach()
foreach(key goal micro_batches figures result result_comm)
  require(tables 2 rows 0 ${key})
endforeach()
foreach(stage 0 1)
  foreach(key schedule stage f_ms b_ms)
    require(tables 3 rows ${stage} ${key})
  endforeach()
endforeach()
require(details configurations 0 steps 0 measured_bubble)
message(STATUS "strata-bench pipeline: exit 0, JSON complete")
