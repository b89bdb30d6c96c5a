// shared_library.hpp — the dlfcn steps flowline's loaders share: plugins (plugin.cpp), CUDA and the
// executors' GPU parts (cuda_loading.cpp,
// torch_support.cpp). Internal to flowline::core. Thread-safe; dlerror() is per thread.
#pragma once

#include <filesystem>
#include <string>

namespace flowline::detail {

// The folder of the loaded library that holds `code` (the address of any of its functions), canonical;
// empty when it cannot be told.
std::filesystem::path library_folder(const void* code);

// dlerror()'s text for the calling thread's last dlfcn failure, or "unknown error".
std::string dl_error_text();

// dlopen(path, RTLD_NOW | flags), then dlsym(entry). The entry's address, or nullptr with `error` saying
// why: the loader's message, or that the library has no `entry`.
void* open_entry(const std::filesystem::path& path, const char* entry, int flags, std::string& error);

}  // namespace flowline::detail
