// Fetching an image over http(s) (flowline/images.hpp, docs/images.md "http(s)"): Boost.Beast over Asio, one
// io_context per download on the calling thread, OpenSSL for https. Every step runs against a deadline: name
// resolution, connect and TLS handshake against the connect deadline, the rest against the total one. The body
// is read by a parser whose body limit is max_bytes, so a larger body fails while it is read and never sits in
// memory past the limit. Addresses are checked after resolution and the connection goes to those checked only.
#include "http.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#if FLOWLINE_HAVE_OPENSSL
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/err.h>
#endif

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <vector>

namespace flowline::images::detail {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
#if FLOWLINE_HAVE_OPENSSL
namespace ssl = net::ssl;
#endif
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Url {
  bool tls = false;
  std::string host;  // without the brackets of an IPv6 literal
  std::uint16_t port = 0;
  std::string target;  // path and query, "/" at least
};

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

Url parse_url(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos) throw FetchError("not an absolute http(s) URI");
  const std::string scheme = lower(uri.substr(0, sep));
  if (scheme != "http" && scheme != "https") throw FetchError(fmt::format("scheme '{}' is not http or https", scheme));
  Url url;
  url.tls = scheme == "https";
  std::string_view rest = uri.substr(sep + 3);
  rest = rest.substr(0, rest.find('#'));
  const auto path_at = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_at);
  url.target = path_at == std::string_view::npos ? "/" : std::string(rest.substr(path_at));
  if (url.target[0] == '?') url.target.insert(0, "/");
  for (char c : url.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      throw FetchError("the URI holds a space or control character (expected %-escapes)");
  }
  if (authority.find('@') != std::string_view::npos) throw FetchError("user names in URIs are not supported");
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw FetchError("an IPv6 host without its closing ']'");
    url.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') throw FetchError("unexpected text after the IPv6 host");
    if (!after.empty()) port = after.substr(1);
  } else {
    const auto colon = authority.find(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty()) throw FetchError("the URI names no host");
  url.port = url.tls ? 443 : 80;
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
      throw FetchError(fmt::format("bad port '{}'", port));
    url.port = static_cast<std::uint16_t>(value);
  }
  return url;
}

std::string origin(const Url& url) {
  const bool v6 = url.host.find(':') != std::string::npos;
  std::string text = fmt::format("{}://{}{}{}", url.tls ? "https" : "http", v6 ? "[" : "", url.host, v6 ? "]" : "");
  if (url.port != (url.tls ? 443 : 80)) text += fmt::format(":{}", url.port);
  return text;
}

// A Location header resolved against the URL it came from (absolute, scheme-relative, absolute-path, relative).
std::string resolve_location(const Url& from, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return std::string(location);
  if (location.substr(0, 2) == "//") return fmt::format("{}:{}", from.tls ? "https" : "http", location);
  if (!location.empty() && location[0] == '/') return origin(from) + std::string(location);
  std::string base = from.target.substr(0, from.target.find('?'));
  base = base.substr(0, base.rfind('/') + 1);
  return origin(from) + base + std::string(location);
}

// Why an address is not a public one ("a loopback address", ...), or "" for a public address.
std::string non_public(const net::ip::address& address) {
  if (address.is_v6()) {
    const auto v6 = address.to_v6();
    if (v6.is_v4_mapped()) return non_public(net::ip::make_address_v4(net::ip::v4_mapped, v6));
    const auto b = v6.to_bytes();
    if (v6.is_loopback()) return "a loopback address";
    if (v6.is_unspecified()) return "an unspecified address";
    if (v6.is_link_local() || v6.is_site_local()) return "a link-local address";
    if (v6.is_multicast()) return "a multicast address";
    if ((b[0] & 0xfe) == 0xfc) return "a private (unique local) address";
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its last four bytes.
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b &&
        std::all_of(b.begin() + 4, b.begin() + 12, [](auto x) { return x == 0; }))
      return non_public(net::ip::make_address_v4(net::ip::address_v4::bytes_type{b[12], b[13], b[14], b[15]}));
    return "";
  }
  const std::uint32_t a = address.to_v4().to_uint();
  const auto in = [a](std::uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  if (in(0x7f000000, 8)) return "a loopback address";
  if (in(0x00000000, 8)) return "an unspecified address";
  if (in(0x0a000000, 8) || in(0xac100000, 12) || in(0xc0a80000, 16)) return "a private address";
  if (in(0x64400000, 10)) return "a shared (carrier-grade NAT) address";
  if (in(0xa9fe0000, 16)) return "a link-local address";
  if (in(0xc0000000, 24) || in(0xc6120000, 15)) return "a reserved address";
  if (in(0xe0000000, 4)) return "a multicast address";
  if (in(0xf0000000, 4)) return "a reserved address";
  return "";
}

#if FLOWLINE_HAVE_OPENSSL
// The system's trust store, loaded once; an ssl::context is safe to share once set up.
ssl::context& tls_context() {
  static ssl::context context = [] {
    ssl::context c(ssl::context::tls_client);
    c.set_default_verify_paths();
    c.set_verify_mode(ssl::verify_peer);
    return c;
  }();
  return context;
}
#endif

std::string seconds(std::chrono::milliseconds ms) { return fmt::format("{:g} s", ms.count() / 1000.0); }

// One request's exchange: runs each asynchronous step to its end on `ioc` (this thread).
class Exchange {
 public:
  Exchange(const Url& url, const ImageSourcePolicy& policy, Clock::time_point deadline)
      : url_(url),
        policy_(policy),
        deadline_(deadline),
        connect_deadline_(std::min(deadline, Clock::now() + policy.http_connect_timeout)) {}

  // The response's status, and its body (2xx) or Location (3xx).
  struct Answer {
    unsigned status = 0;
    std::string reason;
    std::string location;
    Bytes body;
  };

  Answer run() {
    const std::vector<tcp::endpoint> endpoints = resolve();
    if (!url_.tls) {
      beast::tcp_stream stream(ioc_);
      connect(stream, endpoints);
      return exchange(stream);
    }
#if FLOWLINE_HAVE_OPENSSL
    beast::ssl_stream<beast::tcp_stream> stream(ioc_, tls_context());
    if (!SSL_set_tlsext_host_name(stream.native_handle(), url_.host.c_str()))
      throw FetchError(fmt::format("TLS: cannot set the server name '{}'", url_.host));
    stream.set_verify_callback(ssl::host_name_verification(url_.host));
    connect(beast::get_lowest_layer(stream), endpoints);
    beast::get_lowest_layer(stream).expires_at(connect_deadline_);
    beast::error_code ec;
    stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
    drive();
    if (ec == beast::error::timeout) throw timed_out(true);
    if (ec) throw FetchError(fmt::format("TLS handshake with {} failed: {}", url_.host, tls_reason(ec)));
    return exchange(stream);
#else
    throw FetchError("https needs a flowline built with OpenSSL (Debian: libssl-dev); this build has none");
#endif
  }

 private:
  void drive() {
    ioc_.restart();
    ioc_.run();
  }

  FetchError timed_out(bool connecting) const {
    if (connecting && connect_deadline_ < deadline_)
      return FetchError(fmt::format("connecting to {} timed out after {} (http_connect_timeout)", url_.host,
                                    seconds(policy_.http_connect_timeout)));
    return FetchError(fmt::format("timed out after {} (http_timeout)", seconds(policy_.http_timeout)));
  }

#if FLOWLINE_HAVE_OPENSSL
  static std::string tls_reason(const beast::error_code& ec) {
    std::string text = ec.message();
    if (ec.category() == net::error::get_ssl_category()) {
      const char* reason = ERR_reason_error_string(static_cast<unsigned long>(ec.value()));
      if (reason) text = reason;
    }
    return text;
  }
#endif

  // Resolved with a timer that cancels the lookup at the connect deadline; then the non-public addresses
  // dropped unless allowed (all of them dropped: refused, naming one).
  std::vector<tcp::endpoint> resolve() {
    tcp::resolver resolver(ioc_);
    net::steady_timer timer(ioc_);
    beast::error_code ec;
    tcp::resolver::results_type results;
    bool expired = false;
    timer.expires_at(connect_deadline_);
    timer.async_wait([&](beast::error_code e) {
      if (!e) {
        expired = true;
        resolver.cancel();
      }
    });
    resolver.async_resolve(url_.host, std::to_string(url_.port), [&](beast::error_code e, auto r) {
      ec = e;
      results = std::move(r);
      timer.cancel();
    });
    drive();
    if (expired) throw timed_out(true);
    if (ec) throw FetchError(fmt::format("cannot resolve host '{}': {}", url_.host, ec.message()));
    std::vector<tcp::endpoint> allowed;
    std::string refused;
    for (const auto& entry : results) {
      const std::string why = non_public(entry.endpoint().address());
      if (why.empty() || policy_.allow_private_addresses) {
        allowed.push_back(entry.endpoint());
      } else if (refused.empty()) {
        refused = fmt::format("{}, {}", entry.endpoint().address().to_string(), why);
      }
    }
    if (allowed.empty()) {
      if (refused.empty()) throw FetchError(fmt::format("host '{}' has no address", url_.host));
      throw FetchError(
          fmt::format("host '{}' is {}: refused (a flow fetches from private, loopback and link-local "
                      "addresses only when it sets http_allow_private_addresses)",
                      url_.host, refused));
    }
    return allowed;
  }

  void connect(beast::tcp_stream& stream, const std::vector<tcp::endpoint>& endpoints) {
    stream.expires_at(connect_deadline_);
    beast::error_code ec;
    stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    drive();
    if (ec == beast::error::timeout) throw timed_out(true);
    if (ec) throw FetchError(fmt::format("cannot connect to {} port {}: {}", url_.host, url_.port, ec.message()));
  }

  template <class Stream>
  Answer exchange(Stream& stream) {
    http::request<http::empty_body> request{http::verb::get, url_.target, 11};
    const bool default_port = url_.port == (url_.tls ? 443 : 80);
    const bool v6 = url_.host.find(':') != std::string::npos;
    request.set(http::field::host, fmt::format("{}{}{}{}", v6 ? "[" : "", url_.host, v6 ? "]" : "",
                                               default_port ? "" : fmt::format(":{}", url_.port)));
    request.set(http::field::user_agent, "flowline");
    request.set(http::field::accept, "image/*");
    request.set(http::field::connection, "close");
    beast::get_lowest_layer(stream).expires_at(deadline_);
    beast::error_code ec;
    http::async_write(stream, request, [&](beast::error_code e, std::size_t) { ec = e; });
    drive();
    if (ec == beast::error::timeout) throw timed_out(false);
    if (ec) throw FetchError(fmt::format("sending the request failed: {}", ec.message()));

    beast::flat_buffer buffer(64 * 1024);  // a bound on what is read ahead of the parser
    http::response_parser<http::vector_body<std::uint8_t>> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(policy_.max_bytes);
    http::async_read_header(stream, buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    drive();
    check_read(ec);
    Answer answer;
    const auto& header = parser.get();
    answer.status = header.result_int();
    answer.reason = std::string(header.reason());
    if (answer.status >= 300 && answer.status < 400) {
      answer.location = std::string(header[http::field::location]);
      return answer;
    }
    if (answer.status < 200 || answer.status >= 300) return answer;
    http::async_read(stream, buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    drive();
    check_read(ec);
    answer.body = parser.release().body();
    return answer;
  }

  void check_read(const beast::error_code& ec) const {
    if (!ec) return;
    if (ec == beast::error::timeout) throw timed_out(false);
    if (ec == http::error::body_limit)
      throw FetchError(
          fmt::format("the body has more than {} bytes (max_image_bytes): refused while reading", policy_.max_bytes));
    if (ec == http::error::header_limit) throw FetchError("the response's header is over 16 KiB");
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof)
      throw FetchError("the server closed the connection before the whole response was sent");
    throw FetchError(fmt::format("reading the response failed: {}", ec.message()));
  }

  const Url& url_;
  const ImageSourcePolicy& policy_;
  Clock::time_point deadline_;
  Clock::time_point connect_deadline_;
  net::io_context ioc_{1};
};

}  // namespace

Bytes fetch_http(std::string_view uri, const ImageSourcePolicy& policy) {
  const Clock::time_point deadline = Clock::now() + policy.http_timeout;
  std::string current(uri);
  for (int redirects = 0;; ++redirects) {
    const Url url = parse_url(current);
    Exchange::Answer answer = Exchange(url, policy, deadline).run();
    if (answer.status >= 200 && answer.status < 300) {
      if (answer.body.empty()) throw FetchError(fmt::format("HTTP {} with an empty body", answer.status));
      return std::move(answer.body);
    }
    const bool redirect = answer.status == 301 || answer.status == 302 || answer.status == 303 ||
                          answer.status == 307 || answer.status == 308;
    if (!redirect || answer.location.empty())
      throw FetchError(fmt::format("HTTP {} {}{}", answer.status, answer.reason,
                                   current == uri ? "" : fmt::format(" (from '{}', redirected)", current)));
    if (redirects >= policy.http_max_redirects)
      throw FetchError(fmt::format("more than {} redirects (http_max_redirects; the last to '{}')",
                                   policy.http_max_redirects, answer.location));
    current = resolve_location(url, answer.location);
  }
}

}  // namespace flowline::images::detail
