// CLIP-as-service's own Python client (PyPI clip-client 0.8.3, unmodified) against `flowline serve
// flows/clip.yml` on the tests' tiny CLIP checkpoint, the launcher run as a child process on a loopback port it
// picks itself (--port 0 --ready-file): encode of texts, image paths and data: URIs, rank with image and text
// candidates, and a bad image refused with 422 (tests/gateway/clients/clip_client_test.py checks the answers
// against flowline's own /post). The client lives in .venv-clip (scripts/setup-clip-client.sh: it needs
// docarray < 0.30, so not .venv-clients); without it the test skips, except under CI=true, where it fails.
#include "child_process.hpp"
#include "ci.hpp"
#include "test_support.hpp"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

using namespace flowline;
using namespace std::chrono_literals;
using testing::running_in_ci;
namespace fs = std::filesystem;

namespace {

const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kClipPython = kSource / ".venv-clip/bin/python";
const fs::path kScript = kSource / "tests/gateway/clients/clip_client_test.py";
const fs::path kTinyClip = kSource / "tests/data/tiny-models/clip";
const fs::path kImages = kSource / "tests/clip_encoder/data/images";
constexpr int kTinyClipDim = 24;  // projection_dim of tests/data/tiny-models/clip/config.json

// Serves flows/clip.yml (with Jina's gRPC front too when `grpc`) and runs the client script against it, over
// gRPC or http.
void run_clip_client(bool grpc) {
  if (::access(kClipPython.c_str(), X_OK) != 0) {
    const std::string missing = kClipPython.string() + " does not exist (run scripts/setup-clip-client.sh)";
    if (running_in_ci()) FAIL(missing << "; CI=true is set, so this fails instead of skipping");
    FLOWLINE_SKIP(missing);
  }
  const fs::path dir = testing::scratch_dir(grpc ? "clip client grpc" : "clip client");
  const fs::path ready = dir / "port";
  // The shipped flow as it is, its model named explicitly so that FLOWLINE_CLIP_MODEL cannot change the dimension.
  std::vector<std::string> args{FLOWLINE_LAUNCHER,
                                "serve",
                                (kSource / "flows/clip.yml").string(),
                                "--set",
                                "clip.model=" + kTinyClip.string(),
                                "--port",
                                "0",
                                "--ready-file",
                                ready.string()};
  if (grpc) args.insert(args.end(), {"--grpc-port", "0"});
  testing::ChildProcess server(args, dir / "serve.log");
  const int port = testing::wait_for_port(server, ready, 120s);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(port != 0);
  std::string client_url;
  if (grpc) {  // the ready file's second line
    const std::string text = testing::read_text(ready);
    const auto newline = text.find('\n');
    REQUIRE(newline != std::string::npos);
    client_url = fmt::format(" --client-url grpc://127.0.0.1:{}", std::stoi(text.substr(newline + 1)));
  }

  // The script's watchdog (--timeout) bounds it; loopback never goes through a proxy.
  const auto r = testing::run_process(fmt::format(
      "NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost '{}' '{}' --url http://127.0.0.1:{}{} --expect-dim {} "
      "--timeout 120 --image '{}' --image '{}' --image '{}' --image '{}'",
      kClipPython.string(), kScript.string(), port, client_url, kTinyClipDim, (kImages / "smooth-48x30.jpg").string(),
      (kImages / "square-40x40.png").string(), (kImages / "gray-24x64.png").string(),
      (kImages / "rgba-33x33.png").string()));
  INFO("clip_client_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("clip_client_test: PASSED") != std::string::npos);

  const int status = server.stop(30s);
  INFO("flowline serve on SIGTERM: " << testing::describe_status(status));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace

TEST_CASE(
    "CLIP-as-service's own client (clip-client 0.8.3) encodes and ranks texts and images through "
    "flowline serve flows/clip.yml over http",
    "[gateway][clients][clip]") {
  run_clip_client(false);
}

TEST_CASE("CLIP-as-service's own client encodes and ranks over gRPC, its default scheme (docarray < 0.30's documents)",
          "[gateway][clients][clip][grpc]") {
  if (!FLOWLINE_TEST_GRPC) FLOWLINE_SKIP("flowline was built without gRPC C++ (FLOWLINE_GRPC)");
  run_clip_client(true);
}
