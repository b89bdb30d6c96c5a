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
#include "jina_v1.pb.h"

#include <google/protobuf/message_lite.h>

#include <string>

namespace flowline::gateway {

// One Jina request as it came, which then becomes the template of its answer: docarray >= 0.30's documents
// (jina.DataRequestProto), or docarray < 0.30's (jina_v1.DataRequestProto: Jina 3.x clients with the old
// docarray, CLIP-as-service's clip-client among them). The answer goes back in the kind the request came in.
// Owned by the front's call; one thread at a time.
struct JinaRequest {
  jina::DataRequestProto v2;
  jina_v1::DataRequestProto v1;
  bool docarray_v1 = false;  // which of the two is the request

  google::protobuf::MessageLite& message() {
    return docarray_v1 ? static_cast<google::protobuf::MessageLite&>(v1) : v2;
  }
  const google::protobuf::MessageLite& message() const {
    return docarray_v1 ? static_cast<const google::protobuf::MessageLite&>(v1) : v2;
  }
};

// The call of one request: its documents are moved out, and the request becomes the template of its answer
// (header with the request id, generated when the client sent none; parameters). Throws RefusedError:
// BadRequest naming the document and field that is not what flowline reads ("docs[3].embedding: ..."),
// TooLarge beyond limits.max_documents, and BadRequest for nesting deeper than limits.max_json_depth.
Call call_from_proto(jina::DataRequestProto& request, const ParseLimits& limits);

// The same for docarray < 0.30's documents (docs_bytes, which Jina's old docarray does not fill with protobuf,
// is refused): every Document field flowline has (id, text, blob or tensor as the one content, uri, mime_type,
// parent_id, embedding, tags, scores as NamedScores, chunks, matches); the rest (granularity, weight, ...) is
// ignored, as docarray v2's unknown fields are.
Call call_from_proto(jina_v1::DataRequestProto& request, const ParseLimits& limits);
// Whichever of the two the request is.
Call call_from_proto(JinaRequest& request, const ParseLimits& limits);

// Fills the answer (the template call_from_proto left) with the flow's documents, header status SUCCESS.
void write_answer(jina::DataRequestProto& answer, const DocumentArray& docs);
void write_answer(jina_v1::DataRequestProto& answer, const DocumentArray& docs);
void write_answer(JinaRequest& answer, const DocumentArray& docs);
// The answer when an executor failed: header status ERROR with the exception's name ("ExecutorError"),
// its message as args and the executor — what Jina's Client raises as BadServer.
void write_failure(jina::DataRequestProto& answer, const Response& response);
void write_failure(jina_v1::DataRequestProto& answer, const Response& response);
void write_failure(JinaRequest& answer, const Response& response);

// One document to docarray's DocProto, and back (where names "docs[3]" in messages).
void write_document(docarray::DocProto& out, const Document& doc);
Document read_document(const docarray::DocProto& in, const std::string& where, const ParseLimits& limits);
// docarray < 0.30's DocumentProto, and back. A docarray < 0.30 document holds one content: the text when
// there is one, else the blob, else the tensor.
void write_document(docarray_v1::DocumentProto& out, const Document& doc);
Document read_document(const docarray_v1::DocumentProto& in, const std::string& where, const ParseLimits& limits);

}  // namespace flowline::gateway
