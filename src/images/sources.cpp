// Where a document's image comes from (flowline/images.hpp): its blob, a data: URI, or a local file under the
// policy's roots. Paths are canonicalised (symlinks and `..` resolved) before the root check, so neither a
// `..` nor a symlink inside a root leads out of it. http(s) URIs are fetched by http.cpp when the policy allows.
#include "flowline/images.hpp"

#include "http.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

namespace flowline::images {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void refuse(const Document& doc, std::string_view why) {
  throw InputError({}, fmt::format("document '{}': {}", doc.id, why));
}

// `prefix` is lower case.
bool starts_with_nocase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), text.begin(),
                    [](char p, char t) { return std::tolower(static_cast<unsigned char>(t)) == p; });
}

bool has_image_extension(std::string_view uri) {
  uri = uri.substr(0, uri.find_first_of("?#"));
  for (std::string_view ext : {".jpg", ".jpeg", ".png", ".webp"}) {
    if (uri.size() >= ext.size() && starts_with_nocase(uri.substr(uri.size() - ext.size()), ext)) return true;
  }
  return false;
}

// A URI scheme ("http:", "s3:"): letters, digits, + - . after a first letter, two characters at least so that a
// Windows drive letter is not taken for one.
std::string_view scheme_of(std::string_view uri) {
  const auto colon = uri.find(':');
  if (colon == std::string_view::npos || colon < 2 || !std::isalpha(static_cast<unsigned char>(uri[0]))) return {};
  for (char c : uri.substr(0, colon)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return {};
  }
  return uri.substr(0, colon);
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

// Standard or URL-safe base64, padding optional. Returns false on any other character.
bool decode_base64(std::string_view text, Bytes& out) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = base64_value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xff));
    }
  }
  return bits < 6;  // a lone trailing character holds no whole byte
}

Bytes data_uri_bytes(const Document& doc, std::string_view uri) {
  const auto comma = uri.find(',');
  if (comma == std::string_view::npos) refuse(doc, "data: URI has no ',' (expected data:image/...;base64,...)");
  const std::string_view header = uri.substr(5, comma - 5);
  if (!starts_with_nocase(header, "image/"))
    refuse(doc, fmt::format("data: URI of type '{}' is not an image (expected data:image/...;base64,...)",
                            header.substr(0, header.find(';'))));
  if (header.size() < 7 || !starts_with_nocase(header.substr(header.size() - 7), ";base64"))
    refuse(doc, "data: URI is not base64 (expected data:image/...;base64,...)");
  Bytes bytes;
  if (!decode_base64(uri.substr(comma + 1), bytes)) refuse(doc, "data: URI holds invalid base64");
  if (bytes.empty()) refuse(doc, "data: URI holds no bytes");
  return bytes;
}

std::string percent_decode(const Document& doc, std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2])))
      refuse(doc, "file: URI has a bad %-escape");
    out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  if (out.find('\0') != std::string::npos) refuse(doc, "file: URI holds a NUL character");
  return out;
}

bool is_under(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator in the root
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

Bytes local_file_bytes(const Document& doc, const fs::path& path, const ImageSourcePolicy& policy) {
  if (!policy.any_local_path && policy.allowed_roots.empty())
    refuse(doc, fmt::format("local path '{}' refused: this flow reads no local files (a served flow reads them "
                            "only under the folders it names in allowed_uri_roots)",
                            path.string()));
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) refuse(doc, fmt::format("cannot read image '{}': {}", path.string(), ec.message()));
  if (!policy.any_local_path) {
    const bool allowed = std::any_of(policy.allowed_roots.begin(), policy.allowed_roots.end(), [&](const fs::path& r) {
      std::error_code root_ec;
      const fs::path root = fs::canonical(r, root_ec);
      return !root_ec && is_under(real, root);
    });
    if (!allowed)
      refuse(doc, fmt::format("local path '{}' refused: it is not under an allowed root (allowed_uri_roots)",
                              path.string()));
  }
  if (!fs::is_regular_file(real, ec)) refuse(doc, fmt::format("image '{}' is not a regular file", path.string()));
  const auto size = fs::file_size(real, ec);
  if (ec) refuse(doc, fmt::format("cannot read image '{}': {}", path.string(), ec.message()));
  if (size > policy.max_bytes)
    refuse(doc,
           fmt::format("image '{}' has {} bytes, more than the limit of {}", path.string(), size, policy.max_bytes));
  std::ifstream in(real, std::ios::binary);
  Bytes bytes(static_cast<std::size_t>(size));
  if (!in || !in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    refuse(doc, fmt::format("cannot read image '{}'", path.string()));
  if (bytes.empty()) refuse(doc, fmt::format("image '{}' is empty", path.string()));
  return bytes;
}

bool is_http_scheme(std::string_view scheme) {
  return (scheme.size() == 4 && starts_with_nocase(scheme, "http")) ||
         (scheme.size() == 5 && starts_with_nocase(scheme, "https"));
}

}  // namespace

bool is_http_image(const Document& doc) { return doc.blob.empty() && is_http_scheme(scheme_of(doc.uri)); }

std::vector<FetchedImage> fetch_http_images(std::span<const Document* const> docs, const ImageSourcePolicy& policy) {
  std::vector<FetchedImage> out(docs.size());
  std::vector<std::size_t> to_fetch;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (is_http_image(*docs[i])) to_fetch.push_back(i);
  }
  std::atomic<std::size_t> next{0};
  // Each worker takes the next document until none is left; image_bytes() throws only InputError for a
  // document's failure, anything else (bad_alloc) is kept as that document's error too.
  auto work = [&] {
    for (std::size_t k = next++; k < to_fetch.size(); k = next++) {
      FetchedImage& result = out[to_fetch[k]];
      result.fetched = true;
      try {
        result.bytes = image_bytes(*docs[to_fetch[k]], policy);
      } catch (const std::exception& e) {
        result.error = e.what();
      }
    }
  };
  const std::size_t workers = std::min(to_fetch.size(), std::max<std::size_t>(1, policy.http_in_flight));
  std::vector<std::jthread> threads;
  for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work);
  if (workers > 0) work();
  return out;
}

bool has_image(const Document& doc) {
  if (!doc.blob.empty()) return true;
  if (doc.uri.empty()) return false;
  if (starts_with_nocase(doc.uri, "data:")) return starts_with_nocase(std::string_view(doc.uri).substr(5), "image/");
  // Only the server knows what an http(s) uri holds; without an extension or a mime_type it is taken for an image.
  if (is_http_scheme(scheme_of(doc.uri))) return true;
  return starts_with_nocase(doc.mime_type, "image/") || has_image_extension(doc.uri);
}

Bytes image_bytes(const Document& doc, const ImageSourcePolicy& policy) {
  if (!doc.blob.empty()) return doc.blob;
  const std::string_view uri = doc.uri;
  if (uri.empty()) refuse(doc, "has no image (neither a blob nor a uri)");
  const std::string_view scheme = scheme_of(uri);
  if (scheme.empty()) return local_file_bytes(doc, fs::path(doc.uri), policy);
  if (starts_with_nocase(scheme, "data") && scheme.size() == 4) return data_uri_bytes(doc, uri);
  if (starts_with_nocase(scheme, "file") && scheme.size() == 4) {
    std::string_view rest = uri.substr(5);
    if (rest.substr(0, 2) != "//") refuse(doc, "file: URI must start with file:// (file:///absolute/path)");
    rest.remove_prefix(2);
    if (starts_with_nocase(rest, "localhost/")) rest.remove_prefix(9);
    if (rest.empty() || rest[0] != '/') refuse(doc, "file: URI names another host (expected file:///absolute/path)");
    return local_file_bytes(doc, fs::path(percent_decode(doc, rest)), policy);
  }
  if (is_http_scheme(scheme)) {
    if (!policy.allow_http)
      refuse(doc, fmt::format("{} URI refused: fetching images over http(s) is off (send the bytes as a blob or "
                              "a data: URI, or set allow_http in the flow)",
                              scheme));
    try {
      return detail::fetch_http(uri, policy);
    } catch (const detail::FetchError& e) {
      refuse(doc, fmt::format("cannot fetch '{}': {}", uri, e.what()));
    }
  }
  refuse(doc,
         fmt::format("URI scheme '{}' is not supported (expected a blob, data:, file:// or a local path)", scheme));
}

}  // namespace flowline::images
