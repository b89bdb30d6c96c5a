// copy_rows.hpp — the PgVectorWriter's rows as a binary COPY stream (PostgreSQL's COPY ... FROM STDIN (FORMAT
// BINARY): a header, each row's fields as length-prefixed big-endian values, a trailer).
//
// Called on the thread of the part being written, with its lane alone (lanes.hpp); keeps nothing between calls
// but the lane's buffer.
#pragma once

#include "lanes.hpp"

#include "flowline/document.hpp"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace flowline::pgvector_writer {

// Sends the binary COPY stream of documents `rows` of `docs` on `lane` (inside its COPY, begun by the caller),
// their `fields` in order (id, text, tags as jsonb, embedding as pgvector's vector from `embeddings`[i]:
// float32, contiguous, on the CPU; mime_type, uri, parent_id as text), in parts of about 256 KB, each encoded
// in the lane's buffer while the server stores the part before. Returns the bytes sent. Throws flowline::Error
// as PgConnection::copy_put does (`what` names the COPY).
std::size_t send_copy_rows(Lane& lane, const std::vector<std::string>& fields, const DocumentArray& docs,
                           std::span<const std::size_t> rows, const std::vector<at::Tensor>& embeddings,
                           const std::string& what);

}  // namespace flowline::pgvector_writer
