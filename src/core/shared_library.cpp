// The dlfcn steps shared by flowline's loaders: where a loaded library lives, and opening one for an entry.
#include "shared_library.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

namespace flowline::detail {

std::filesystem::path library_folder(const void* code) {
  Dl_info info{};
  if (dladdr(code, &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  const auto library = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path{} : library.parent_path();
}

std::string dl_error_text() {
  const char* error = dlerror();
  return error ? error : "unknown error";
}

void* open_entry(const std::filesystem::path& path, const char* entry, int flags, std::string& error) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | flags);
  if (handle == nullptr) {
    error = dl_error_text();
    return nullptr;
  }
  void* symbol = dlsym(handle, entry);
  if (symbol == nullptr) error = fmt::format("no entry point {}", entry);
  return symbol;
}

}  // namespace flowline::detail
