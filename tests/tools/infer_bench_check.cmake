# infer_bench_check.cmake: runs a tiny `strata-bench infer` and checks that it exits 0 and that
# its JSON has a row per (batch, tp) with positive tokens/s; where PyTorch is installed, its
# column is filled and the greedy tokens are the same.
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> -P infer_bench_check.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake")
run_bench("${JSON}" 240 infer --layers 1 --width 32 --heads 2 --context 48 --new-tokens 4
          --batches 1,3 --tp 1)
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "expected 2 rows (batches 1 and 3 at tp 1), got ${rows}\n${out}")
endif()
string(JSON torch GET "${doc}" config torch)
foreach(i 0 1)
  string(JSON tps GET "${doc}" tables 0 rows ${i} tokens_per_s)
  if(NOT tps GREATER 0)
    message(FATAL_ERROR "row ${i}: tokens_per_s ${tps}")
  endif()
  string(JSON same GET "${doc}" tables 0 rows ${i} same_tokens)
  if(torch AND NOT same STREQUAL "yes")
    message(FATAL_ERROR "row ${i}: PyTorch's greedy tokens differ (${same})\n${out}")
  endif()
endforeach()
message(STATUS "strata-bench infer: exit 0, 2 rows, PyTorch ${torch}")
