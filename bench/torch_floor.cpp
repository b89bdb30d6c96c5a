// torch_floor: the least any flowline process pays for LibTorch. Links only c10 and torch_cpu (as
// flowline::core does) and adds two tensors. bench/footprint.py runs it beside `flowline run` so the
// launcher's own start-up cost reads as the difference, measured on the same machine in the same run.
#include <ATen/ATen.h>

#include <cstdio>

int main() {
  const at::Tensor sum = at::ones({2}) + at::ones({2});
  std::printf("%.1f\n", sum.sum().item<float>());
  return 0;
}
