// A Boost.JSON parser that tracks line and column, so a bad JSON input is reported where it went wrong.
#include "json_parse.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include <charconv>
#include <cmath>
#include <string>

namespace flowline::detail {
namespace {

// A basic_parser handler that builds the value with a value_stack, re-reading doubles from their text.
struct ExactHandler {
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  boost::json::value_stack stack;
  std::string number;  // the text of a number split across parts

  bool on_document_begin(boost::system::error_code&) {
    stack.reset();
    return true;
  }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) { return true; }
  bool on_object_end(std::size_t n, boost::system::error_code&) {
    stack.push_object(n);
    return true;
  }
  bool on_array_begin(boost::system::error_code&) { return true; }
  bool on_array_end(std::size_t n, boost::system::error_code&) {
    stack.push_array(n);
    return true;
  }
  bool on_key_part(boost::json::string_view s, std::size_t, boost::system::error_code&) {
    stack.push_chars(s);
    return true;
  }
  bool on_key(boost::json::string_view s, std::size_t, boost::system::error_code&) {
    stack.push_key(s);
    return true;
  }
  bool on_string_part(boost::json::string_view s, std::size_t, boost::system::error_code&) {
    stack.push_chars(s);
    return true;
  }
  bool on_string(boost::json::string_view s, std::size_t, boost::system::error_code&) {
    stack.push_string(s);
    return true;
  }
  bool on_number_part(boost::json::string_view s, boost::system::error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t v, boost::json::string_view, boost::system::error_code&) {
    number.clear();
    stack.push_int64(v);
    return true;
  }
  bool on_uint64(std::uint64_t v, boost::json::string_view, boost::system::error_code&) {
    number.clear();
    stack.push_uint64(v);
    return true;
  }
  bool on_double(double v, boost::json::string_view s, boost::system::error_code& error) {
    number.append(s.data(), s.size());
    double exact = v;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), exact);
    if (ec != std::errc() || end != number.data() + number.size()) exact = v;  // out of range: keep Boost's value
    number.clear();
    // A number beyond a double's range would become an infinity, which JSON cannot write back (Boost.JSON
    // writes "Infinity"): refuse it where it stands (found by tests/fuzz/fuzz_document_json).
    if (!std::isfinite(exact)) {
      error = boost::json::error::exponent_overflow;
      return false;
    }
    stack.push_double(exact);
    return true;
  }
  bool on_bool(bool b, boost::system::error_code&) {
    stack.push_bool(b);
    return true;
  }
  bool on_null(boost::system::error_code&) {
    stack.push_null();
    return true;
  }
  bool on_comment_part(boost::json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(boost::json::string_view, boost::system::error_code&) { return true; }
};

}  // namespace

boost::json::value parse_json(std::string_view text, boost::system::error_code& ec) {
  boost::json::basic_parser<ExactHandler> parser(boost::json::parse_options{});
  const std::size_t used = parser.write_some(false, text.data(), text.size(), ec);
  if (ec) return nullptr;
  // Only white space may follow the value.
  for (std::size_t i = used; i < text.size(); ++i) {
    const char c = text[i];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      ec = boost::json::error::extra_data;
      return nullptr;
    }
  }
  return parser.handler().stack.release();
}

}  // namespace flowline::detail
