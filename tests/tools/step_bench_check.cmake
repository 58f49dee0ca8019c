# step_bench_check.cmake: runs a tiny `strata-bench step` on the CPU and checks that it exits 0
# and that its JSON has strata's row with a positive step time and an MFU against the SGEMM rate
# it measured; where PyTorch is installed, PyTorch's row too (the bench itself refuses a peer
# whose model has another parameter count).
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> -P step_bench_check.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake")
run_bench("${JSON}" 240 step --layers 1 --width 32 --heads 2 --context 16 --batch 2 --steps 6
          --warmup 2)
string(JSON rows LENGTH "${doc}" tables 0 rows)
string(JSON torch GET "${doc}" config torch)
set(expected 1)
if(torch)
  set(expected 2)
endif()
if(NOT rows EQUAL expected)
  message(FATAL_ERROR "expected ${expected} rows, got ${rows}\n${out}")
endif()
string(JSON params GET "${doc}" config params)
if(NOT params GREATER 0)
  message(FATAL_ERROR "no parameter count from the trainer's log\n${out}")
endif()
math(EXPR last "${rows} - 1")
foreach(i RANGE ${last})
  foreach(key step_ms mfu_pct)
    string(JSON v GET "${doc}" tables 0 rows ${i} ${key})
    if(NOT v GREATER 0)
      message(FATAL_ERROR "row ${i}: ${key} ${v}\n${out}")
    endif()
  endforeach()
endforeach()
message(STATUS "strata-bench step: exit 0, ${rows} rows, ${params} parameters")
