// Tests of http(s) image URIs (flowline::images): a local server (http_image_server.py, started on a loopback
// port it picks) serves a test JPEG, a too-big body, a slow one, a redirect loop and a 404; every bound is
// checked to hold, and non-public addresses to be refused unless the policy allows them.
#include "image_files.hpp"
#include "image_server.hpp"
#include "test_support.hpp"

#include "flowline/images.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

using namespace flowline;
using namespace std::chrono_literals;

namespace {

using testing::image_dir;
using testing::input_error;
using testing::read_bytes;

const std::filesystem::path kImage = image_dir() / "rgb_40x30_q90.jpg";

testing::ImageServer start_server(const std::string& name, bool tls = false) {
  return testing::start_image_server(name, kImage, tls);
}

Document image_doc(const std::string& uri) {
  Document doc;
  doc.id = "d1";
  doc.uri = uri;
  return doc;
}

// The policy the tests fetch with: loopback allowed (the server is there), short bounds.
images::ImageSourcePolicy local_policy() {
  images::ImageSourcePolicy policy;
  policy.allow_http = true;
  policy.allow_private_addresses = true;
  policy.http_timeout = 1500ms;
  policy.http_connect_timeout = 1000ms;
  return policy;
}

}  // namespace

TEST_CASE("an http image uri is fetched only when the policy allows http", "[images][http]") {
  const testing::ImageServer server = start_server("http-fetch");
  const Document doc = image_doc(server.url("/image.jpg"));
  images::ImageSourcePolicy off;
  CHECK(input_error([&] { images::image_bytes(doc, off); }) ==
        "document 'd1': http URI refused: fetching images over http(s) is off (send the bytes as a blob or a data: "
        "URI, or set allow_http in the flow)");
  const Bytes bytes = images::image_bytes(doc, local_policy());
  CHECK(bytes == read_bytes(kImage));
  CHECK(images::decode_image(bytes).width == 40);
  CHECK(images::is_http_image(doc));
  Document with_blob = doc;
  with_blob.blob = bytes;
  CHECK_FALSE(images::is_http_image(with_blob));
}

TEST_CASE("redirects are followed up to the bound, and a loop is refused", "[images][http]") {
  const testing::ImageServer server = start_server("http-redirects");
  auto policy = local_policy();
  CHECK(images::image_bytes(image_doc(server.url("/redirect")), policy) == read_bytes(kImage));
  CHECK(images::image_bytes(image_doc(server.url("/redirect-abs")), policy) == read_bytes(kImage));
  const std::string loop = server.url("/loop");
  CHECK(input_error([&] { images::image_bytes(image_doc(loop), policy); }) ==
        fmt::format("document 'd1': cannot fetch '{}': more than 5 redirects (http_max_redirects; the last to '/loop')",
                    loop));
  policy.http_max_redirects = 0;
  CHECK_THAT(input_error([&] { images::image_bytes(image_doc(server.url("/redirect")), policy); }),
             testing::contains("more than 0 redirects"));
}

TEST_CASE("an http error status fails the document with the status", "[images][http]") {
  const testing::ImageServer server = start_server("http-404");
  const std::string uri = server.url("/missing");
  CHECK(input_error([&] { images::image_bytes(image_doc(uri), local_policy()); }) ==
        fmt::format("document 'd1': cannot fetch '{}': HTTP 404 Not Found", uri));
}

TEST_CASE("a body over max_bytes is refused while it is read", "[images][http]") {
  const testing::ImageServer server = start_server("http-big");
  auto policy = local_policy();
  policy.max_bytes = 100'000;
  for (const char* path : {"/big", "/big-chunked"}) {
    INFO(path);
    CHECK_THAT(input_error([&] { images::image_bytes(image_doc(server.url(path)), policy); }),
               testing::contains("the body has more than 100000 bytes (max_image_bytes): refused while reading"));
  }
  policy.max_bytes = 2 << 20;
  CHECK(images::image_bytes(image_doc(server.url("/big-chunked")), policy).size() == (1u << 20));
}

TEST_CASE("a slow or silent server is given up on at the time bound", "[images][http]") {
  const testing::ImageServer server = start_server("http-slow");
  auto policy = local_policy();
  policy.http_timeout = 1000ms;
  for (const char* path : {"/slow", "/silent"}) {
    INFO(path);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THAT(input_error([&] { images::image_bytes(image_doc(server.url(path)), policy); }),
               testing::contains("timed out after 1 s (http_timeout)"));
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took >= 900ms);
    CHECK(took < 3s);
  }
}

TEST_CASE("loopback, private and link-local addresses are refused unless allowed", "[images][http]") {
  const testing::ImageServer server = start_server("http-private");
  auto policy = local_policy();
  policy.allow_private_addresses = false;
  CHECK_THAT(input_error([&] { images::image_bytes(image_doc(server.url("/image.jpg")), policy); }),
             testing::contains("host '127.0.0.1' is 127.0.0.1, a loopback address: refused (a flow fetches from "
                               "private, loopback and link-local addresses only when it sets "
                               "http_allow_private_addresses)"));
  // Refused from the address alone: nothing listens at these, no connection is tried.
  const std::pair<const char*, const char*> cases[] = {
      {"http://localhost:9/a.jpg", "a loopback address"},
      {"http://10.1.2.3/a.jpg", "10.1.2.3, a private address"},
      {"http://192.168.0.1/a.jpg", "a private address"},
      {"http://172.20.0.1/a.jpg", "a private address"},
      {"http://169.254.169.254/latest/meta-data", "169.254.169.254, a link-local address"},
      {"http://[::1]:9/a.jpg", "::1, a loopback address"},
      {"http://[::ffff:127.0.0.1]/a.jpg", "a loopback address"},
      {"https://[fd00::1]/a.jpg", "a private (unique local) address"},
      {"http://0.0.0.0/a.jpg", "an unspecified address"},
  };
  for (const auto& [uri, why] : cases) {
    INFO(uri);
    CHECK_THAT(input_error([&] { images::image_bytes(image_doc(uri), policy); }), testing::contains(why));
  }
}

TEST_CASE("bad http uris and unreachable servers fail the document naming the uri", "[images][http]") {
  const auto policy = local_policy();
  const std::string closed = fmt::format("http://127.0.0.1:{}/a.jpg", testing::unused_loopback_port());
  CHECK_THAT(
      input_error([&] { images::image_bytes(image_doc(closed), policy); }),
      testing::contains(fmt::format("document 'd1': cannot fetch '{}': cannot connect to 127.0.0.1 port", closed)));
  CHECK_THAT(input_error([&] { images::image_bytes(image_doc("http://user@example.com/a.jpg"), policy); }),
             testing::contains("user names in URIs are not supported"));
  CHECK_THAT(input_error([&] { images::image_bytes(image_doc("http:///a.jpg"), policy); }),
             testing::contains("the URI names no host"));
  CHECK_THAT(input_error([&] { images::image_bytes(image_doc("http://example.com:99999/a.jpg"), policy); }),
             testing::contains("bad port '99999'"));
  // A machine whose resolver cannot be reached gives up at the connect bound instead of hearing "not found".
  const std::string unresolved =
      input_error([&] { images::image_bytes(image_doc("http://host.invalid/a.jpg"), policy); });
  INFO(unresolved);
  CHECK(
      (unresolved.find("cannot resolve host 'host.invalid'") != std::string::npos ||
       unresolved.find("connecting to host.invalid timed out after 1 s (http_connect_timeout)") != std::string::npos));
}

TEST_CASE("https verifies the server's certificate against the system's store", "[images][http]") {
  if (std::system("openssl version >/dev/null 2>&1") != 0) {
    WARN("no openssl command to make the test server's certificate: not tested");
    return;
  }
  const testing::ImageServer server = start_server("https-self-signed", true);
  const std::string uri = server.url("/image.jpg");
  const std::string refusal = input_error([&] { images::image_bytes(image_doc(uri), local_policy()); });
  if (refusal.find("https needs a flowline built with OpenSSL") != std::string::npos) {
    WARN("built without OpenSSL (no libssl-dev): https is refused, as it says; certificates not tested");
    return;
  }
  CHECK_THAT(refusal,
             testing::contains(fmt::format("document 'd1': cannot fetch '{}': TLS handshake with 127.0.0.1 failed: "
                                           "certificate verify failed",
                                           uri)));
}

TEST_CASE("fetch_http_images downloads several at once, bounded, and leaves other documents alone", "[images][http]") {
  const testing::ImageServer server = start_server("http-many");
  std::vector<Document> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(image_doc(server.url("/delayed.jpg")));
  docs.push_back(image_doc(server.url("/missing")));
  Document blob;
  blob.id = "blob";
  blob.blob = read_bytes(kImage);
  docs.push_back(blob);
  std::vector<const Document*> ptrs;
  for (const auto& d : docs) ptrs.push_back(&d);
  auto timed = [&](std::size_t in_flight) {
    auto policy = local_policy();
    policy.http_timeout = 5s;
    policy.http_in_flight = in_flight;
    const auto start = std::chrono::steady_clock::now();
    const auto fetched = images::fetch_http_images(ptrs, policy);
    const auto took = std::chrono::steady_clock::now() - start;
    REQUIRE(fetched.size() == docs.size());
    for (int i = 0; i < 4; ++i) {
      CHECK(fetched[i].fetched);
      CHECK(fetched[i].bytes == blob.blob);
      CHECK(fetched[i].error.empty());
    }
    CHECK(fetched[4].fetched);
    CHECK_THAT(fetched[4].error, testing::contains("HTTP 404 Not Found"));
    CHECK_FALSE(fetched[5].fetched);
    CHECK(fetched[5].bytes.empty());
    return took;
  };
  CHECK(timed(1) >= 2s);     // four 0.5 s downloads one after another
  CHECK(timed(8) < 1500ms);  // at once
}
