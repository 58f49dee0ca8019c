# Install.cmake: `cmake --install build [--prefix P]` installs the binaries, the public headers
# (P/include/strata/<layer>/...) and a CMake package, so another project can
#   find_package(strata)  and link  strata::ps (the parameter-server client, membership, wire
#   format) or strata::trainer (models, collectives, the training loop)
# (examples/consumer/ is such a project; ctest -R InstallConsumer builds and runs it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)
install(TARGETS strata-scheduler strata-server strata-trainer strata-launch strata-task strata-node
                strata-schedule strata-ckpt
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(strata_libraries strata_common strata_cluster strata_offload strata_ps strata_comm strata_trainer strata_auto)
if(STRATA_HAVE_CUDA)
  list(APPEND strata_libraries strata_nccl)
endif()
foreach(lib IN LISTS strata_libraries)
  string(REPLACE "strata_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})
  add_library(strata::${short} ALIAS ${lib})
endforeach()
install(TARGETS ${strata_libraries} EXPORT strataTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)
foreach(layer common cluster offload ps trainer)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/${layer}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/common/wire.capnp.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/common)
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION ${STRATA_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/strataConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/strataConfig.cmake ${CMAKE_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${STRATA_INSTALL_CMAKEDIR})
