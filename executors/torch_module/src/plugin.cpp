// Entry point of the TorchModule plugin, libflowline_torch_module.so in the executor folder: how the launcher
// and Registry::global() load TorchModule (a program may link flowline::torch_module instead).
#include "flowline/torch_module/torch_module.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::torch_module::register_torch_module(registry); }
