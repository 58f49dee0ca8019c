# chaos_bench_check.cmake: a short `strata-bench chaos` (one server kill, one scheduler kill, one
# trainer stop, one server stalled past its heartbeat timeout if the job lasts that long, the
# hostile client, one ledger kill) must exit 0 with no crash, every trainer finished, and no
# acknowledged update lost or applied twice. (The full campaign is a program:
# docs/reliability.md.)
# With -DCYCLES (a ;-list of chaos's cycle options) other faults run instead, and -DKILLS and
# -DJOINS say how many server kills and server joins+leaves the disturbed run must show;
# -DEXACT_AUC=ON: its AUC must equal the undisturbed run's (BSP with 2 trainers is deterministic).
#   cmake -DBENCH=<strata-bench> -DJSON=<output file> [-DEXTRA=--replication] [-DLEDGER_CYCLES=n]
#         [-DCYCLES=...] [-DKILLS=n] [-DJOINS=n] [-DEXACT_AUC=ON] -P chaos_bench_check.cmake
file(REMOVE "${JSON}")
if(NOT DEFINED LEDGER_CYCLES)
  set(LEDGER_CYCLES 1)
endif()
if(NOT DEFINED CYCLES)
  set(CYCLES --server-cycles 1 --scheduler-cycles 1 --stop-cycles 1 --stall-cycles 1)
endif()
if(NOT DEFINED KILLS)
  set(KILLS 1)
endif()
if(NOT DEFINED JOINS)
  set(JOINS 0)
endif()
execute_process(
  COMMAND "${BENCH}" chaos --steps 300 ${CYCLES} --ledger-cycles ${LEDGER_CYCLES} --fault-interval 0.5
          --timeout 200 --json "${JSON}" ${EXTRA}
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
string(JSON joins GET "${doc}" tables 0 rows 1 joins)
string(JSON auc GET "${doc}" tables 0 rows 1 auc)
string(JSON auc0 GET "${doc}" tables 0 rows 0 auc)
string(JSON lost GET "${doc}" tables 2 rows 0 lost)
string(JSON duplicated GET "${doc}" tables 2 rows 0 duplicated)
string(JSON acknowledged GET "${doc}" tables 2 rows 0 acknowledged)
string(JSON failed GET "${doc}" tables 2 rows 0 failed)
string(JSON failed_applied GET "${doc}" tables 2 rows 0 failed_applied)
if(NOT finished STREQUAL "yes" OR NOT crashes EQUAL 0 OR NOT kills EQUAL KILLS OR NOT joins EQUAL JOINS)
  message(FATAL_ERROR "disturbed run: finished ${finished}, crashes ${crashes}, server kills ${kills} (want ${KILLS}), "
                      "server joins ${joins} (want ${JOINS})\n${out}")
endif()
if(EXACT_AUC AND NOT auc STREQUAL auc0)
  message(FATAL_ERROR "disturbed AUC ${auc}, undisturbed ${auc0}: a deterministic run must end the same\n${out}")
endif()
if(NOT lost EQUAL 0 OR NOT duplicated EQUAL 0 OR NOT acknowledged GREATER 0)
  message(FATAL_ERROR "ledger: ${acknowledged} acknowledged, ${lost} lost, ${duplicated} duplicated "
                      "(${failed} pushes failed, ${failed_applied} of their increments applied)\n${out}")
endif()
message(STATUS "strata-bench chaos: no crash, trainers finished, ${acknowledged} acknowledged updates, none lost or "
               "doubled (${failed} pushes failed, ${failed_applied} of their increments applied)")
