# install_consumer_check.cmake: `cmake --install` of this build into a fresh prefix, then
# examples/consumer (find_package(strata)) configured and built against it: strata-consumer
# (strata::ps) run as the trainer of a local cluster started by the installed strata-launch (a
# scheduler and one installed strata-server) must push, pull and exit 0; strata-trainer-consumer
# (strata::trainer) trains a small MLP in its process and checks its loss and step metrics.
#   cmake -DBUILD=<build dir> -DSOURCE=<repo> -DWORK=<scratch dir> -P install_consumer_check.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(prefix "${WORK}/prefix")
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 400)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${prefix}")
foreach(f bin/strata-launch bin/strata-server include/strata/ps/client.h include/strata/common/wire.capnp.h
          lib/cmake/strata/strataConfig.cmake lib/cmake/strata/strataTargets.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
run("configuring examples/consumer" ${CMAKE_COMMAND} -S "${SOURCE}/examples/consumer" -B "${WORK}/consumer" -G Ninja
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=RelWithDebInfo)
run("building examples/consumer" ${CMAKE_COMMAND} --build "${WORK}/consumer")
file(WRITE "${WORK}/job.yaml" "cluster: {heartbeat_interval_ms: 200, heartbeat_timeout_ms: 3000}\n")
run("the consumer against a local cluster"
    "${prefix}/bin/strata-launch" --servers 1 --trainers 1 --timeout 120
    --trainer-command "${WORK}/consumer/strata-consumer" "${WORK}/job.yaml")
if(NOT last_output MATCHES "pushed and pulled 2 rows through strata::ps: ok")
  message(FATAL_ERROR "the consumer did not report its rows:\n${last_output}")
endif()
run("the trainer consumer (strata::trainer)" "${WORK}/consumer/strata-trainer-consumer")
if(NOT last_output MATCHES "40 steps through strata::trainer, loss .* 40 step times: ok")
  message(FATAL_ERROR "the trainer consumer did not report its steps:\n${last_output}")
endif()
