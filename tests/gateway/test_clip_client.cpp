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

}  // namespace

TEST_CASE(
    "CLIP-as-service's own client (clip-client 0.8.3) encodes and ranks texts and images through "
    "flowline serve flows/clip.yml over http",
    "[gateway][clients][clip]") {
  if (::access(kClipPython.c_str(), X_OK) != 0) {
    const std::string missing = kClipPython.string() + " does not exist (run scripts/setup-clip-client.sh)";
    if (running_in_ci()) FAIL(missing << "; CI=true is set, so this fails instead of skipping");
    FLOWLINE_SKIP(missing);
  }
  const fs::path dir = testing::scratch_dir("clip client");
  const fs::path ready = dir / "port";
  // The shipped flow as it is, its model named explicitly so that FLOWLINE_CLIP_MODEL cannot change the dimension.
  testing::ChildProcess server({FLOWLINE_LAUNCHER, "serve", (kSource / "flows/clip.yml").string(), "--set",
                                "clip.model=" + kTinyClip.string(), "--port", "0", "--ready-file", ready.string()},
                               dir / "serve.log");
  const int port = testing::wait_for_port(server, ready, 120s);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(port != 0);

  // The script's watchdog (--timeout) bounds it; loopback never goes through a proxy.
  const auto r = testing::run_process(fmt::format(
      "NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost '{}' '{}' --url http://127.0.0.1:{} --expect-dim {} "
      "--timeout 120 --image '{}' --image '{}' --image '{}' --image '{}'",
      kClipPython.string(), kScript.string(), port, kTinyClipDim, (kImages / "smooth-48x30.jpg").string(),
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
