# Dependencies.cmake: every third-party library strata uses, from Debian packages
# (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)

pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)      # cppzmq is header-only: zmq.hpp
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
find_package(CapnProto CONFIG REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(Gloo CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)   # checksums (common/checksum.h)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # /metrics (tools/metrics_endpoint.h)
find_package(GTest CONFIG REQUIRED)
find_package(benchmark CONFIG REQUIRED)
