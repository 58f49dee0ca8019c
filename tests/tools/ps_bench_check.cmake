# ps_bench_check.cmake: runs a short `strata-bench ps` (one server, two small dense tensors, one
# sparse shape and one wide one) and `strata-bench transport` (64 B over tcp, few messages), and
# checks that both exit 0 and that their JSON has every peer's figure positive (not their
# size): ours (one call in flight and several), the raw stream (plain, and with the receiver's
# SGD or copy), the raw one-call-in-flight peer, and the codec's own row; and the ps run again
# with --pin.
#   cmake -DBENCH=<strata-bench> -DJSON=<output file prefix> -P ps_bench_check.cmake
include("${CMAKE_CURRENT_LIST_DIR}/run_bench.cmake")
run_bench("${JSON}.ps.json" 240 ps --servers 1 --dense-sizes 64KiB,3MiB --dims 4 --batches 100
          --wide-dims 1 --wide-batches 100 --seconds 0.05)
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "expected 2 dense rows (64 KiB, 3 MiB), got ${rows}\n${out}")
endif()
# Every one of `keys` in rows 0 and 1 of table `table` must be a number above 0.
function(expect_positive table what)
  foreach(i 0 1)
    foreach(key ${ARGN})
      string(JSON value ERROR_VARIABLE error GET "${doc}" tables ${table} rows ${i} ${key})
      if(error OR NOT value GREATER 0)
        message(FATAL_ERROR "${what} row ${i}: ${key} is '${value}' ${error}\n${out}")
      endif()
    endforeach()
  endforeach()
endfunction()
expect_positive(0 "dense" push_gb_per_s pull_gb_per_s raw_gb_per_s raw_chunked_gb_per_s raw_call_push_gb_per_s
                raw_call_pull_gb_per_s push_call_ratio pull_call_ratio push_pull_gb_per_s push_pull_call_ratio)
expect_positive(2 "dense with calls in flight" push_gb_per_s pull_gb_per_s push_ratio pull_ratio in_flight)
expect_positive(3 "dense beside raw doing the receiver's pass" raw_chunked_gb_per_s raw_sgd_ratio raw_call_sgd_gb_per_s
                raw_call_sgd_ratio push_sgd_ratio raw_copy_ratio raw_call_copy_gb_per_s raw_call_copy_ratio
                pull_copy_ratio)
string(JSON rows LENGTH "${doc}" tables 1 rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "expected 2 sparse rows (dim 4 and the wide dim 1), got ${rows}\n${out}")
endif()
foreach(i 0 1)
  string(JSON pulled GET "${doc}" tables 1 rows ${i} pull_mrows_per_s)
  string(JSON pushed GET "${doc}" tables 1 rows ${i} push_mrows_per_s)
  if(NOT pulled GREATER 0 OR NOT pushed GREATER 0)
    message(FATAL_ERROR "sparse row ${i}: pull ${pulled}, push ${pushed} M rows/s\n${out}")
  endif()
endforeach()

# --pin (where there are 2 CPUs to split): every peer measured with this process on one CPU.
cmake_host_system_information(RESULT cpus QUERY NUMBER_OF_LOGICAL_CORES)
if(cpus GREATER_EQUAL 2)
  run_bench("${JSON}.ps-pin.json" 240 ps --pin --servers 1 --dense-sizes 64KiB --dims 4 --batches 100
            --wide-dims 1 --wide-batches 100 --seconds 0.02)
  string(JSON pinned GET "${doc}" config pin)
  string(JSON pushed GET "${doc}" tables 0 rows 0 push_gb_per_s)
  string(JSON raw_sgd GET "${doc}" tables 3 rows 0 raw_call_sgd_gb_per_s)
  if(NOT pinned OR NOT pushed GREATER 0 OR NOT raw_sgd GREATER 0 OR NOT out MATCHES "--pin: this process")
    message(FATAL_ERROR "ps --pin: pin '${pinned}', push ${pushed} GB/s, raw call+sgd ${raw_sgd} GB/s\n${out}")
  endif()
endif()

run_bench("${JSON}.transport.json" 120 transport --sizes 64 --transports tcp --iters 20 --reps 2
          --messages 2000)
string(JSON rows LENGTH "${doc}" tables 0 rows)
if(NOT rows EQUAL 1)
  message(FATAL_ERROR "expected 1 transport row (tcp, 64 B), got ${rows}\n${out}")
endif()
foreach(key our_kmsg_per_s raw_kmsg_per_s our_p50_us raw_p50_us ratio our_cpu_ns_per_msg
            raw_cpu_ns_per_msg cpu_ratio)
  string(JSON value ERROR_VARIABLE error GET "${doc}" tables 0 rows 0 ${key})
  if(error OR NOT value GREATER 0)
    message(FATAL_ERROR "transport row: ${key} is '${value}' ${error}\n${out}")
  endif()
endforeach()
foreach(key encode_ns decode_ns copy_ns send_path_ns receive_path_ns)
  string(JSON value ERROR_VARIABLE error GET "${doc}" tables 1 rows 0 ${key})
  if(error OR NOT value GREATER 0)
    message(FATAL_ERROR "codec row: ${key} is '${value}' ${error}\n${out}")
  endif()
endforeach()
string(JSON row GET "${doc}" tables 0 rows 0)
message(STATUS "strata-bench ps and transport: exit 0, every peer measured; transport row: ${row}")
