// The gateway's gRPC front in a build without gRPC C++ (FLOWLINE_GRPC=OFF, or gRPC not found): it is not
// available, and asking for it says why.
#include "grpc_front.hpp"

#include "flowline/error.hpp"

namespace flowline::gateway {

bool GrpcFront::available() noexcept { return false; }

std::unique_ptr<GrpcFront> GrpcFront::start(Core&, const std::string&, std::uint16_t) {
  throw Error(
      "protocol grpc: this flowline was built without its gRPC front (gRPC C++ was not found at build time: install "
      "libgrpc++-dev, protobuf-compiler-grpc and libprotobuf-dev, then rebuild)");
}

}  // namespace flowline::gateway
