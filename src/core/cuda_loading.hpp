// cuda_loading.hpp — the core's handle on flowline's CUDA part (internal to flowline::core).
//
// cuda_api() loads LibTorch's CUDA library and libflowline_cuda.so on its first call (load_cuda() in
// flowline/device.hpp says how) and returns their table, or nullptr when CUDA cannot be used here.
// Thread-safe; the table lives as long as the process.
#pragma once

#include "../cuda/cuda_api.hpp"

namespace flowline::detail {

const CudaApi* cuda_api();

}  // namespace flowline::detail
