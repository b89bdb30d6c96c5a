// The image-fetching tests' local HTTP(S) server (tests/images/http_image_server.py): started on a loopback port
// it picks, stopped when the returned value goes. Header-only, for test_images and test_clip_encoder.
#pragma once

#include "child_process.hpp"
#include "test_support.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::testing {

struct ImageServer {
  std::unique_ptr<ChildProcess> process;
  int port = 0;
  bool tls = false;
  std::string url(std::string_view path) const {
    return fmt::format("{}://127.0.0.1:{}{}", tls ? "https" : "http", port, path);
  }
};

// Serves `image` as /image.jpg (and the other paths the script lists); REQUIREs that it started within 20 s.
inline ImageServer start_image_server(const std::string& name, const std::filesystem::path& image, bool tls = false) {
  const auto dir = scratch_dir(name);
  const auto ready = dir / "port";
  std::vector<std::string> args{FLOWLINE_TEST_PYTHON,
                                std::string(FLOWLINE_SOURCE_DIR) + "/tests/images/http_image_server.py", ready.string(),
                                "--image", image.string()};
  if (tls) args.push_back("--tls");
  ImageServer server;
  server.tls = tls;
  server.process = std::make_unique<ChildProcess>(args, dir / "server.log");
  server.port = wait_for_port(*server.process, ready, std::chrono::seconds(20));
  INFO(server.process->log());
  REQUIRE(server.port > 0);
  return server;
}

}  // namespace flowline::testing
