# gRPC C++ for the GPU machine, which has none: imported targets over Debian's gRPC 1.51 libraries unpacked
# from .device/grpc.tar.xz (scripts/prepare-device.sh --grpc) into FLOWLINE_GRPC_BUNDLE. Used only by
# scripts/gpu-run.sh (-DgRPC_DIR=scripts/gpu-grpc); everywhere else the system's gRPCConfig.cmake is found.
# The libraries' own dependencies (absl, re2, c-ares) resolve from the bundle's lib folder through
# LD_LIBRARY_PATH, which gpu-run.sh sets for the build and the runs.
if(NOT FLOWLINE_GRPC_BUNDLE OR NOT EXISTS "${FLOWLINE_GRPC_BUNDLE}/lib/libgrpc++.so.1.51")
  set(gRPC_FOUND FALSE)
  return()
endif()
set(_bundle "${FLOWLINE_GRPC_BUNDLE}")
file(GLOB _absl "${_bundle}/lib/libabsl_*.so.*")
if(NOT TARGET gRPC::grpc++)
  add_library(gRPC::grpc++ SHARED IMPORTED)
  set_target_properties(gRPC::grpc++ PROPERTIES
    IMPORTED_LOCATION "${_bundle}/lib/libgrpc++.so.1.51"
    INTERFACE_INCLUDE_DIRECTORIES "${_bundle}/include"
    # Protobuf here too, and --no-as-needed: with CMake 4's FindProtobuf target and Ubuntu's --as-needed
    # default, libflowline_gateway.so came out without libprotobuf (its references left to the older
    # protobuf LibTorch exports, and the launcher's link failed).
    INTERFACE_LINK_OPTIONS "LINKER:--no-as-needed"
    INTERFACE_LINK_LIBRARIES
      "${_bundle}/lib/libprotobuf.so.32;${_bundle}/lib/libgrpc.so.29;${_bundle}/lib/libgpr.so.29;${_bundle}/lib/libupb.so.29;${_absl}")
  add_executable(gRPC::grpc_cpp_plugin IMPORTED)
  set_target_properties(gRPC::grpc_cpp_plugin PROPERTIES IMPORTED_LOCATION "${_bundle}/bin/grpc_cpp_plugin")
endif()
set(gRPC_VERSION 1.51.1)
set(gRPC_FOUND TRUE)
