// flowline/vector_index/vector_index.hpp — the VectorIndex executor: Jina's indexer, durable.
//
//   - name: index
//     uses: VectorIndex
//     with: {workspace: workspace/, metric: cosine, backend: exact, limit: 10}
//     device: cuda
//
// Endpoints (a request to any other endpoint passes through unchanged):
//   /index   stores each document's id, text, uri, tags and embedding; a stored id is replaced (one document
//            per id). A document without an embedding fails the request, and nothing of it is stored.
//   /search  each document's embedding is a query: its matches become the `limit` best stored documents,
//            best first, each with its id, text, uri, tags and scores[metric] (cosine similarity, inner
//            product, or l2 distance). Request parameters: limit, filter (filter.hpp's Mongo-like language on
//            tags, id, text and uri), return_embeddings (the answer carries each match's embedding and the
//            query's own; without it, neither: a query's embedding is dropped once searched), ef_search
//            (hnsw: its candidate list for this search).
//   /update  the fields a document carries (text, uri, tags, embedding) replace the stored ones; every id
//            must be in the index, or the request fails and nothing changes.
//   /delete  removes the documents of these ids; each gets tags["deleted"]: whether it was there.
//   /clear   removes every document.
//   /status  one document (or each document sent) whose tags hold count, dimension, metric, backend, where
//            (device and storage), bytes and workspace.
//
// Backends: `exact` scores every vector with one matrix product per block of queries on the executor's
// device (fp16 on a GPU by default); `hnsw` is hnswlib's graph on the CPU (when flowline was built with it).
// Filters apply before an exact search (recall 1) and after an hnsw search, widened until enough matches
// pass (docs/search.md).
//
// Durability: with a `workspace`, a change is in the workspace's log, synced to disk, before the request is
// answered; snapshots replace the log as it grows and at close; a restart replays them. Damaged files stop
// the start with the file and byte offset. One process writes a workspace (a lock). Without a workspace
// the index lives in memory only. Replicas in one process are copies sharing one store (ReplicaGroup): they
// search at once and make changes one at a time; they must sit on one device.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::vector_index {

// Adds VectorIndex to `registry`. The launcher loads it from the executor folder (libflowline_vector_index.so).
void register_vector_index(Registry& registry);

}  // namespace flowline::vector_index
