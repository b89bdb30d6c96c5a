// The npy and safetensors inputs (private to the library): a 2-D float array on disk, one document per row
// with the row as its embedding, and the sidecar a binary output writes beside it for ids, texts and tags
// (io.hpp's open_file_source says what is read and refused).
//
// Contract: a source from open_array_source is used by one thread at a time (io.hpp's DocumentSource). It reads
// the header, checks the file's size against it and counts the sidecar's documents when opened, and then reads
// rows in blocks as read() asks for them; skip() and count_left() read no row.
#pragma once

#include "flowline/io.hpp"

#include <filesystem>
#include <memory>

namespace flowline::detail {

// `npy`: a .npy file, else a .safetensors one. Throws InputError naming the file (and, for a sidecar that does
// not match, the sidecar) when it cannot be read as one.
std::unique_ptr<DocumentSource> open_array_source(const std::filesystem::path& path, bool npy);

}  // namespace flowline::detail
