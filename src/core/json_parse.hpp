// Exact JSON parsing for flowline's readers (private to the library).
#pragma once

#include <boost/json/value.hpp>
#include <boost/system/error_code.hpp>

#include <string_view>

namespace flowline::detail {

// Parses one JSON text into a boost::json::value. Unlike boost::json::parse in Boost 1.81, numbers with a
// fraction or exponent are converted with std::from_chars, which rounds correctly, so a double written in
// its shortest form reads back to the same bits.
boost::json::value parse_json(std::string_view text, boost::system::error_code& ec);

}  // namespace flowline::detail
