// cuda_loading.hpp — the core's handle on flowline's CUDA part (internal to flowline::core).
//
// cuda_api() loads LibTorch's CUDA library and libflowline_cuda.so on its first call (load_cuda() in
// flowline/device.hpp says how) and returns their table, or nullptr when CUDA cannot be used here.
// cuda_problem() is why cuda_api() is nullptr (what is missing, naming the library and the folder
// searched), empty when it is not; it loads the same way. Callers: load_cuda() (device.cpp),
// load_gpu_part() (torch_support.cpp) and the core's few CUDA calls.
// Thread-safe; the table and the text live as long as the process.
#pragma once

#include "../cuda/cuda_api.hpp"

#include <string>

namespace flowline::detail {

const CudaApi* cuda_api();
const std::string& cuda_problem();

}  // namespace flowline::detail
