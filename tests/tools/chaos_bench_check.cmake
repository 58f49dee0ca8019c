# chaos_bench_check.cmake: a short `strata-bench chaos` (one server kill, one scheduler kill, one
# trainer stop, one server stalled past its heartbeat timeout if the job lasts that long, the
# hostile client, one ledger kill) must exit 0 with no crash, every trainer finished, and no
# acknowledged update lost or applied twice. (The full campaign is a program:
# docs/reliability.md.)
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> [-DEXTRA=--replication] [-DLEDGER_CYCLES=n]
#         -P chaos_bench_check.cmake
file(REMOVE "${JSON}")
if(NOT DEFINED LEDGER_CYCLES)
  set(LEDGER_CYCLES 1)
endif()
execute_process(
  COMMAND "${BENCH}" chaos --steps 300 --server-cycles 1 --scheduler-cycles 1 --stop-cycles 1
          --stall-cycles 1 --ledger-cycles ${LEDGER_CYCLES} --fault-interval 0.5 --timeout 200 --json "${JSON}" ${EXTRA}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "strata-bench chaos exited with ${rc}\n${out}\n${err}")
endif()
file(READ "${JSON}" doc)
string(JSON benchmark GET "${doc}" benchmark)
if(NOT benchmark STREQUAL "chaos")
  message(FATAL_ERROR "benchmark is \"${benchmark}\", not \"chaos\"")
endif()
string(JSON finished GET "${doc}" tables 0 rows 1 finished)
string(JSON crashes GET "${doc}" tables 0 rows 1 crashes)
string(JSON kills GET "${doc}" tables 0 rows 1 server_kills)
string(JSON lost GET "${doc}" tables 2 rows 0 lost)
string(JSON duplicated GET "${doc}" tables 2 rows 0 duplicated)
string(JSON acknowledged GET "${doc}" tables 2 rows 0 acknowledged)
if(NOT finished STREQUAL "yes" OR NOT crashes EQUAL 0 OR NOT kills EQUAL 1)
  message(FATAL_ERROR "disturbed run: finished ${finished}, crashes ${crashes}, server kills ${kills}\n${out}")
endif()
if(NOT lost EQUAL 0 OR NOT duplicated EQUAL 0 OR NOT acknowledged GREATER 0)
  message(FATAL_ERROR "ledger: ${acknowledged} acknowledged, ${lost} lost, ${duplicated} duplicated\n${out}")
endif()
message(STATUS "strata-bench chaos: no crash, trainers finished, ${acknowledged} acknowledged updates, none lost or doubled")
