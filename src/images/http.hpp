// src/images/http.hpp — downloading an image over http(s) for image_bytes() (private to the images library).
// fetch_http blocks the calling thread until the body is in, an error, or policy.http_timeout; it keeps no state
// but the shared TLS context (the system's trust store, loaded once), so any number of threads may call it.
#pragma once

#include "flowline/images.hpp"

#include <stdexcept>
#include <string_view>

namespace flowline::images::detail {

// What went wrong, without the document (image_bytes() adds it): "HTTP 404 Not Found", "timed out after 2 s
// (http_timeout)", "the body has more than N bytes ...", "TLS handshake with H failed: certificate verify failed".
class FetchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The body of a 2xx answer to GET `uri`, following redirects, within the policy's bounds (flowline/images.hpp).
Bytes fetch_http(std::string_view uri, const ImageSourcePolicy& policy);

}  // namespace flowline::images::detail
