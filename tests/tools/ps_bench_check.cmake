# ps_bench_check.cmake: runs a short `strata-bench ps` (one server, two small dense tensors, one
# sparse shape) and `strata-bench transport` (64 B over tcp, few messages), and checks that both
# exit 0 and that their JSON has every peer's figure positive (not their values' size):
# ours, the raw stream and the raw one-call-in-flight peer.
#   cmake -DBENCH=<strata-bench> -DJSON=<output file prefix> -P ps_bench_check.cmake
file(REMOVE "${JSON}.ps.json" "${JSON}.transport.json")
execute_process(
  COMMAND "${BENCH}" ps --servers 1 --dense-sizes 64KiB,3MiB --dims 4 --batches 100 --wide-dims ""
          --seconds 0.05 --json "${JSON}.ps.json"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata-bench ps exited with ${rc}\n${out}\n${err}")
endif()
file(READ "${JSON}.ps.json" doc)
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "expected 2 dense rows (64 KiB, 3 MiB), got ${rows}\n${out}")
endif()
foreach(i 0 1)
  foreach(key push_gb_per_s pull_gb_per_s raw_gb_per_s raw_chunked_gb_per_s raw_call_push_gb_per_s
              raw_call_pull_gb_per_s push_call_ratio pull_call_ratio)
    string(JSON value ERROR_VARIABLE error GET "${doc}" tables 0 rows ${i} ${key})
    if(error OR NOT value GREATER 0)
      message(FATAL_ERROR "dense row ${i}: ${key} is '${value}' ${error}\n${out}")
    endif()
  endforeach()
endforeach()
string(JSON pulled GET "${doc}" tables 1 rows 0 pull_mrows_per_s)
if(NOT pulled GREATER 0)
  message(FATAL_ERROR "sparse row: pull_mrows_per_s is '${pulled}'\n${out}")
endif()

execute_process(
  COMMAND "${BENCH}" transport --sizes 64 --transports tcp --iters 20 --reps 2 --messages 2000
          --json "${JSON}.transport.json"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata-bench transport exited with ${rc}\n${out}\n${err}")
endif()
file(READ "${JSON}.transport.json" doc)
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 1)
  message(FATAL_ERROR "expected 1 transport row (tcp, 64 B), got ${rows}\n${out}")
endif()
string(JSON row GET "${doc}" tables 0 rows 0)
message(STATUS "strata-bench ps and transport: exit 0, every peer measured; transport row: ${row}")
