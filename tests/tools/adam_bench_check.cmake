# adam_bench_check.cmake: runs `strata-bench adam` on two small sizes at 1 and 2 threads and
# checks that it exits 0 and that its JSON has a row per size and thread count, each with a
# positive bandwidth bound, fused rate and plain-loop rate, and every column present.
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> -P adam_bench_check.cmake
file(REMOVE "${JSON}")
execute_process(
  COMMAND "${BENCH}" adam --sizes 64K,100003 --threads 1,2 --reps 1 --json "${JSON}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata-bench adam exited with ${rc}\n${out}\n${err}")
endif()
file(READ "${JSON}" doc)

string(JSON benchmark GET "${doc}" benchmark)
if(NOT benchmark STREQUAL "adam")
  message(FATAL_ERROR "benchmark is \"${benchmark}\", not \"adam\"")
endif()
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 4)
  message(FATAL_ERROR "expected 4 rows (2 sizes x threads 1, 2), got ${rows}\n${out}")
endif()
set(expect_params 65536 65536 100003 100003)
set(expect_threads 1 2 1 2)
foreach(i 0 1 2 3)
  list(GET expect_params ${i} want_params)
  list(GET expect_threads ${i} want_threads)
  string(JSON params GET "${doc}" tables 0 rows ${i} params)
  string(JSON threads GET "${doc}" tables 0 rows ${i} threads)
  if(NOT params EQUAL want_params OR NOT threads EQUAL want_threads)
    message(FATAL_ERROR "row ${i}: ${params} params at ${threads} threads, expected ${want_params} at ${want_threads}")
  endif()
  foreach(key bound_mparams bound_gbps fused_mparams fused_pct_of_bound plain_mparams
              scalar_mparams fused_over_plain)
    string(JSON value ERROR_VARIABLE error GET "${doc}" tables 0 rows ${i} ${key})
    if(error)
      message(FATAL_ERROR "row ${i} lacks ${key}: ${error}")
    endif()
    if(NOT value GREATER 0)
      message(FATAL_ERROR "row ${i}: ${key} is ${value}, not positive")
    endif()
  endforeach()
  foreach(key avx512_mparams avx2_mparams)  # null where the CPU lacks the path
    string(JSON value ERROR_VARIABLE error GET "${doc}" tables 0 rows ${i} ${key})
    if(error)
      message(FATAL_ERROR "row ${i} lacks ${key}: ${error}")
    endif()
  endforeach()
endforeach()
message(STATUS "strata-bench adam: exit 0, a row per size and thread count, every rate positive")
