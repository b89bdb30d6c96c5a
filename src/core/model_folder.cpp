// locate_model (flowline/model_folder.hpp): a model parameter as a folder or a name in the Hugging Face cache.
#include "flowline/model_folder.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>

namespace flowline {

namespace fs = std::filesystem;

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

bool is_name_part(std::string_view part) {
  if (part.empty() || part == "." || part == "..") return false;
  for (const char c : part) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// The revision refs/main names, when its snapshot is there.
fs::path main_snapshot(const fs::path& repo) {
  std::ifstream in(repo / "refs" / "main");
  std::string revision;
  if (!in || !std::getline(in, revision)) return {};
  while (!revision.empty() && (revision.back() == '\r' || revision.back() == ' ')) revision.pop_back();
  if (revision.empty() || revision.find('/') != std::string::npos) return {};
  const fs::path snapshot = repo / "snapshots" / revision;
  std::error_code ec;
  return fs::is_directory(snapshot, ec) ? snapshot : fs::path();
}

// The only snapshot, or the one last written.
fs::path newest_snapshot(const fs::path& repo) {
  fs::path best;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!entry.is_directory(ec)) continue;
    const auto time = entry.last_write_time(ec);
    if (ec) continue;
    if (best.empty() || time > best_time) {
      best = entry.path();
      best_time = time;
    }
  }
  return best;
}

}  // namespace

fs::path hugging_face_hub_cache() {
  if (const std::string hub = environment("HF_HUB_CACHE"); !hub.empty()) return hub;
  if (const std::string home = environment("HF_HOME"); !home.empty()) return fs::path(home) / "hub";
  if (const std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) return fs::path(xdg) / "huggingface" / "hub";
  return fs::path(environment("HOME")) / ".cache" / "huggingface" / "hub";
}

bool is_hub_model_name(std::string_view text) {
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos) return false;
  return is_name_part(text.substr(0, slash)) && is_name_part(text.substr(slash + 1));
}

ModelLocation locate_model(std::string_view written, const fs::path& folder) {
  std::error_code ec;
  if (fs::is_directory(folder, ec) || !is_hub_model_name(written)) return ModelLocation{folder, {}};
  const std::size_t slash = written.find('/');
  const fs::path hub = hugging_face_hub_cache();
  const fs::path repo = hub / fmt::format("models--{}--{}", written.substr(0, slash), written.substr(slash + 1));
  fs::path snapshot = main_snapshot(repo);
  if (snapshot.empty()) snapshot = newest_snapshot(repo);
  if (!snapshot.empty()) return ModelLocation{snapshot, {}};
  return ModelLocation{
      {},
      fmt::format("'{}' is neither a folder (no '{}') nor a model in the local Hugging Face cache (no snapshot in "
                  "'{}'; the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub). Download it "
                  "there with `hf download {}` (or load it once with sentence-transformers), or give the path of a "
                  "checkpoint folder (docs/models.md)",
                  written, folder.string(), (repo / "snapshots").string(), written)};
}

std::string random_weights_warning(const std::filesystem::path& folder, std::string_view executor,
                                   std::string_view parameter, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::exists(folder / kRandomWeightsMarker, ec)) return {};
  return fmt::format(
      "executor '{}': the model {} holds random weights (a test checkpoint: it has a {} file), so its {} mean "
      "nothing; give it a real checkpoint with --set {}.{}=DIR",
      executor, folder.string(), kRandomWeightsMarker, what, executor, parameter);
}

}  // namespace flowline
