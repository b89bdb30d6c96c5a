// Jina's gRPC messages (jina.proto, docarray.proto) to gateway calls and back: a DataRequestProto's
// documents (docarray's DocListProto, or its serialized bytes in docs_bytes), parameters (a protobuf
// Struct), endpoint, target executor and request id become a gateway::Call; the flow's documents become the
// answer's DocListProto, every field of the Document table written as docarray reads it (an embedding or
// tensor as an "ndarray" node, tags as a dict, matches and chunks as document lists, scores as a dict of
// {"value": float}). No sockets here: the gRPC front calls these on its threads, the tests and the fuzz
// target directly. Pure functions, callable from any thread. Private to flowline::gateway.
#pragma once

#include "../core.hpp"
#include "../protocols.hpp"

#include "jina.pb.h"

#include <string>

namespace flowline::gateway {

// The call of one request: its documents are moved out, and the request becomes the template of its answer
// (header with the request id, generated when the client sent none; parameters). Throws RefusedError:
// BadRequest naming the document and field that is not what flowline reads ("docs[3].embedding: ..."),
// TooLarge beyond limits.max_documents, and BadRequest for nesting deeper than limits.max_json_depth.
Call call_from_proto(jina::DataRequestProto& request, const ParseLimits& limits);

// Fills the answer (the template call_from_proto left) with the flow's documents, header status SUCCESS.
void write_answer(jina::DataRequestProto& answer, const DocumentArray& docs);
// The answer when an executor failed: header status ERROR with the exception's name ("ExecutorError"),
// its message as args and the executor — what Jina's Client raises as BadServer.
void write_failure(jina::DataRequestProto& answer, const Response& response);

// One document to docarray's DocProto, and back (where names "docs[3]" in messages).
void write_document(docarray::DocProto& out, const Document& doc);
Document read_document(const docarray::DocProto& in, const std::string& where, const ParseLimits& limits);

}  // namespace flowline::gateway
