// The lines and jsonl inputs (private to the library): LineSource, which open_file_source and open_stdin_source
// hand out for those formats, and the UTF-8 check every text source makes.
//
// Contract: a source from open_line_source is used by one thread at a time (io.hpp's DocumentSource); its
// read(), skip() and count_left() share one definition of a line and of a line that holds a document (more
// than spaces and tabs). check_utf8 is pure and callable from any thread.
#pragma once

#include "flowline/io.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace flowline::detail {

// Throws InputError naming `name`:line:column of the first invalid UTF-8 sequence of `text`, whose first line is
// `first_line` of the file.
void check_utf8(const std::string& name, std::string_view text, std::size_t first_line);

// Streams `path` one line at a time, a document per line (jsonl: a JSON document per line). `name`: what errors
// and documents' uri call it (empty: the path; "<stdin>" for standard input). Throws InputError when the file
// cannot be opened or is a folder.
std::unique_ptr<DocumentSource> open_line_source(const std::filesystem::path& path, bool jsonl, std::string name = {});

}  // namespace flowline::detail
