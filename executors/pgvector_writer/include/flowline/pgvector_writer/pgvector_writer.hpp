// flowline/pgvector_writer/pgvector_writer.hpp — the PgVectorWriter executor: every document it sees, as one
// row of a PostgreSQL table with pgvector's `vector` type, the single sink of a flow that fills a database.
//
//   - name: db
//     uses: PgVectorWriter
//     with: {uri: "postgresql://app@db.example/vectors", table: passages, index: hnsw}
//
// Connection: `uri`, a PostgreSQL connection URI or key=value string, else (empty) libpq's PG* environment
// variables (PGHOST, PGPORT, PGDATABASE, PGUSER, ...). A password is never taken from the flow: a `uri`
// holding one is refused at validation ("give it through PGPASSWORD or ~/.pgpass"), and every message and
// log line names the server as host, port, database and user only. An unreachable server is retried with
// doubling backoff (0.2 s up to 5 s, `connect_attempts` tries); an authentication failure is not retried.
// Errors say which: "cannot reach PostgreSQL server (...)", "authentication failed at PostgreSQL server (...)".
//
// Table: `table` (NAME or SCHEMA.NAME, letters, digits and _) with one column per field of `fields` (id
// always): id text PRIMARY KEY, text text, tags jsonb, embedding vector(N), mime_type, uri and parent_id
// text. With `create: true` (the default) the writer runs CREATE EXTENSION IF NOT EXISTS vector (its failure
// is reported as pgvector missing) and creates the table when it is missing, N being `dimension` or, when 0,
// the first request's embeddings. An existing table must have those columns and, when its embedding column
// has a dimension, the documents' (else: "table T's embedding column is vector(384), the documents'
// embeddings have 768 dimensions"). A document without an embedding fails its request, named by position
// and id; embeddings of any dtype and device are written as float4 (float32's bits).
//
// Writing: each request's rows go in by COPY ... FROM STDIN (FORMAT BINARY); with `on_conflict: update` (the
// default) through a temporary table and INSERT ... ON CONFLICT (id) DO UPDATE, so an id written again
// replaces its row (the last of a request's documents with one id wins); with `on_conflict: error` straight
// into the table, where a repeated id fails the request. With `connections: N` (default 1) the writer holds N
// connections and splits each request's rows into N parts written at once, one transaction per connection
// (src/lanes.hpp); the COMMITs are sent only once every part is ready, and a part that fails before rolls all
// back. The handler returns — the request is acknowledged — only after every COMMIT succeeded. A failed
// request leaves nothing behind, with one exception: with N > 1 an upsert whose parts committed on some
// connections and failed at COMMIT on another keeps the committed parts (the rows they replaced are gone; the
// error says so; a plain COPY's committed parts are deleted again). Documents pass on unchanged. Endpoints: any
// (the default handler).
//
// Resuming (flowline/resumable_sink.hpp): under `flowline run`, each part's transaction also
// upserts its row of flowline_progress (run key, input documents written, last id; src/table_progress.hpp); with
// `resume: true` (flowline run --resume) the writer reads them back, refuses another run's, repairs a request
// that a kill left committed on some connections only (a plain COPY's rows there deleted by id, an upsert's
// written again), checks the table holds the last id, and skips the documents it holds. The rows are deleted
// when the run completes. They never name a document the table does not hold, so a request that fails leaves
// them where they were (its error says so) until that request is written after all; once another request comes
// instead, they stay there for the run, a warning says so, and with on_conflict: error the later requests are
// refused (a --resume, which writes them again from there, would find their rows), so that `flowline run
// --resume` completes the table. With several replicas (which commit requests in any order) each replica's parts
// keep rows of their own holding the input prefix and the ranges committed past it (src/replicated_progress.hpp):
// the first replica reads and repairs them for all, the run resumes at the prefix and the replicas skip the
// documents of those ranges; a failed request is simply missing from them, and --resume writes it again.
//
// Index: `index: hnsw` or `ivfflat` builds that index on the embedding column (operator class from `metric`:
// cosine, l2, ip) once the run completed, at close, by replica 0 (after loading: far faster than keeping an
// index up to date row by row). `lists` sets IVFFlat's lists (0: rows / 1000, at least 1).
//
// Threads and ownership: the Flow constructs, calls and closes each replica on that replica's own thread
// (never concurrently); each replica owns its `connections` connections, opened in its constructor and closed
// when it is destroyed. A handler call writes part 0 on the replica's thread and each other part on a thread of
// its own, and returns once all of them finished. Replicas write at once through their own connections;
// creating the extension and the table is serialised between them by a PostgreSQL advisory lock.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::pgvector_writer {

// Adds PgVectorWriter to `registry`. The launcher loads it from the executor folder
// (libflowline_pg_vector_writer.so).
void register_pgvector_writer(Registry& registry);

}  // namespace flowline::pgvector_writer
