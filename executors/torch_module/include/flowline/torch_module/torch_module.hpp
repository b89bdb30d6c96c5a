// flowline/torch_module/torch_module.hpp — the TorchModule executor: any TorchScript model on a tensor field.
//
//   - name: classifier
//     uses: TorchModule
//     device: cuda
//     with: {path: models/classifier.pt, input: tensor, output: embedding, dtype: fp16, batch_size: 256}
//
// Parameters: path (a TorchScript file saved with torch.jit.save), method (default "forward"), input
// (the document field read: tensor or embedding), output (the field written: embedding or tensor),
// device (cpu, cuda, cuda:N, auto; empty: the executor's `device:` in the flow), dtype (fp32, fp16, bf16:
// the module and floating-point inputs are cast to it; outputs come back as float32), batch_size (rows per
// call), keep_on_device (leave outputs on the executor's device for a following executor on the same
// device instead of copying them to the host), share_weights.
//
// Each batch's inputs must all have the same shape; they are stacked into one [N, ...] tensor (on the
// executor's device, in pinned host memory first when they come from the host) and run in chunks of
// batch_size rows. The method must return a tensor whose first dimension is the chunk's row count; row i
// becomes document i's output. A document without the input field, a shape that differs from the
// batch's first, or an output of the wrong size fails the batch with an error naming the document or
// the shapes. Replicas on one device share one loaded module (share_weights) and each run on their own
// CUDA stream; the module is called under inference mode, so it must not rely on autograd.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::torch_module {

// Adds TorchModule to `registry`. The launcher calls it for the global registry.
void register_torch_module(Registry& registry);

}  // namespace flowline::torch_module
