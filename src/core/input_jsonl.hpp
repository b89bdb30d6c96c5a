// The JSONL input's fast path (private to the library): one line read straight into a Document, without
// building a JSON value first, for the lines JSONL inputs are made of (string fields, float32 tensors of
// numbers, and any other field).
//
// Contract: read_document_fast(line, doc) either fills `doc` exactly as document_from_json(line) would and
// returns true, or returns false having found something it leaves to document_from_json (which then
// accepts the line or refuses it with its own message, so errors read the same either way): another dtype
// than float32, a number JSON does not allow or beyond a double's range, a duplicate or unknown key, a
// string escape it does not decode, nesting deeper than Boost.JSON's limit, trailing text. Numbers are
// read as Python's float() reads them (std::from_chars to double, correctly rounded) and then rounded to
// float32, as document_from_json does; "-0" keeps its sign, as float("-0") does.
// Pure: callable from any thread; each thread reuses its own scratch row (no allocation per number).
#pragma once

#include "flowline/document.hpp"

#include <string_view>

namespace flowline::detail {

bool read_document_fast(std::string_view line, Document& doc);

}  // namespace flowline::detail
