// The VectorIndex executor: Jina's indexer endpoints over a Store (store.hpp), which holds the documents,
// their vectors in a backend, and the workspace that makes changes durable.
#include "flowline/vector_index/vector_index.hpp"

#include "store.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/resumable_sink.hpp"
#include "flowline/torch_support.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>

namespace flowline::vector_index {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Document i's embedding as a float row; a clear error when it has none.
at::Tensor embedding_row(const Document& doc, std::size_t i, std::string_view endpoint) {
  if (!doc.embedding.defined()) {
    throw Error(
        fmt::format("document {} ('{}') has no embedding: {} needs one (put an encoder before the index, "
                    "or send embeddings)",
                    i, doc.id, endpoint));
  }
  if (doc.embedding.numel() == 0 || doc.embedding.numel() != doc.embedding.size(-1)) {
    throw Error(fmt::format("document {} ('{}'): its embedding must be one vector, not of shape {}", i, doc.id,
                            fmt::join(doc.embedding.sizes(), "x")));
  }
  return doc.embedding.reshape({-1});
}

// The documents' embeddings as one float [n, dim] matrix on the CPU. Embeddings that already are contiguous
// float CPU vectors (what encoders and the gateway's codecs give) are copied row by row without a tensor
// operation each; any other is converted.
at::Tensor rows_of(const DocumentArray& docs, std::string_view endpoint) {
  if (docs.empty()) return at::empty({0, 0}, at::kFloat);
  const std::int64_t dim = embedding_row(docs[0], 0, endpoint).size(0);
  at::Tensor rows = at::empty({static_cast<std::int64_t>(docs.size()), dim}, at::kFloat);
  auto* out = rows.data_ptr<float>();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const at::Tensor& e = docs[i].embedding;
    const bool plain =
        e.defined() && e.dim() == 1 && e.scalar_type() == at::kFloat && e.device().is_cpu() && e.is_contiguous();
    const at::Tensor row = plain ? e : embedding_row(docs[i], i, endpoint);
    if (row.size(0) != dim) {
      throw Error(fmt::format("document {} ('{}'): an embedding of {} dimensions after ones of {}", i, docs[i].id,
                              row.size(0), dim));
    }
    if (plain) {
      std::memcpy(out + static_cast<std::int64_t>(i) * dim, e.data_ptr<float>(), sizeof(float) * dim);
    } else {
      rows[static_cast<std::int64_t>(i)].copy_(row);
    }
  }
  return rows;
}

// The queries of a /search as one float [n, dim] matrix: on `device` when it is a GPU and every embedding is
// already a float vector there of one size (an encoder on the same GPU kept them there), stacked with one
// kernel on the current stream; otherwise rows_of() above, on the CPU (a copy out per query, and the exact
// backend copies them back).
at::Tensor query_rows(const DocumentArray& docs, const c10::Device& device) {
  if (device.is_cuda() && !docs.empty()) {
    std::vector<at::Tensor> rows;
    rows.reserve(docs.size());
    for (const Document& doc : docs) {
      const at::Tensor& e = doc.embedding;
      if (!e.defined() || e.dim() != 1 || e.device() != device || e.scalar_type() != at::kFloat || e.numel() == 0 ||
          e.numel() != docs[0].embedding.numel()) {
        rows.clear();
        break;
      }
      rows.push_back(e);
    }
    if (!rows.empty()) return at::stack(rows);
  }
  return rows_of(docs, "/search");
}

// `shards: N`: where a shard keeps its workspace (FOLDER/shard-S-of-N), after checking that the folder holds
// no index of another shape (unsharded, or in another number of shards): documents are routed by a hash of
// their id modulo N, so an index cannot be read back with another N.
std::string shard_workspace(const std::string& folder, int shard, int shards) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> other;
  bool unsharded = false;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "index.wal" || name == "index.snapshot") unsharded = true;
    int s = 0, n = 0;
    char tail = 0;
    if (std::sscanf(name.c_str(), "shard-%d-of-%d%c", &s, &n, &tail) == 2 && n != shards) other.push_back(name);
  }
  std::sort(other.begin(), other.end());
  if (shards > 1 && unsharded) {
    throw Error(
        fmt::format("workspace {} holds an index that is not sharded; this flow has shards: {}, which keep "
                    "their data in {}/shard-S-of-{}: index into a new workspace (an index is not "
                    "re-sharded in place)",
                    folder, shards, folder, shards));
  }
  if (!other.empty()) {
    throw Error(fmt::format(
        "workspace {} holds an index in another number of shards ({}); this flow has {}: "
        "index into a new workspace (an index is not re-sharded in place)",
        folder, fmt::join(other, ", "), shards == 1 ? std::string("no shards") : fmt::format("shards: {}", shards)));
  }
  return shards > 1 ? (fs::path(folder) / fmt::format("shard-{}-of-{}", shard, shards)).string() : folder;
}

}  // namespace

// One answer of a shard set from its shards' answers (shard_merge.cpp).
DocumentArray merge_shards(std::string_view endpoint, const boost::json::object& parameters, const Params& params,
                           std::vector<DocumentArray>& parts);

namespace {

class VectorIndex : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "VectorIndex",
        "Index documents' embeddings and find each query's nearest (exact on a GPU or CPU, or HNSW), durably",
        {ParamSpec::optional("workspace", ParamType::Path, "",
                             "folder holding the index (log and snapshots); empty: in memory only, lost at exit"),
         ParamSpec::choice("metric", {"cosine", "inner_product", "ip", "l2", "euclidean"}, "cosine",
                           "how matches are scored (cosine and inner_product: higher is better; l2: a distance)"),
         ParamSpec::optional("dim", ParamType::Int, 0, "vector size (0: the first indexed vectors settle it)").min(0),
         ParamSpec::optional("limit", ParamType::Int, 10, "matches per query (a request's 'limit' overrides it)")
             .min(1),
         ParamSpec::optional("max_limit", ParamType::Int, 10000, "the largest 'limit' a request may ask for").min(1),
         ParamSpec::optional("max_answer_matches", ParamType::Int, 100000,
                             "a /search request's queries x limit at most (refused past it before any work)")
             .min(1),
         ParamSpec::optional("max_answer_mb", ParamType::Int, 64,
                             "MiB a /search answer's matches may take (ids, texts, uris, tags as JSON, embeddings "
                             "4 bytes a number); refused past it before any match is written")
             .min(1),
         ParamSpec::optional("max_filter_size", ParamType::Int, 10000,
                             "JSON values a request's filter may hold (keys' values, list items, operands)")
             .min(1),
         ParamSpec::optional("max_filter_conditions", ParamType::Int, 100,
                             "field tests a request's filter may hold (each runs on every document; an $in list, "
                             "or an $or of equalities on one field, is one)")
             .min(1),
         ParamSpec::optional("return_embeddings", ParamType::Bool, false,
                             "/search answers carry embeddings: each match's, and the query's own (else neither)"),
         ParamSpec::optional("snapshot_mb", ParamType::Int, 256,
                             "write a snapshot (and empty the log) once the log holds this many MiB")
             .min(1)},
        {"/index", "/search", "/update", "/delete", "/clear", "/status"},
    };
    // The backend and each backend's own parameters, from the backend table (backend.hpp), after the metric.
    std::vector<std::string> names;
    std::string help;
    std::vector<ParamSpec> backend_params;
    for (const BackendRow& row : backend_table()) {
      names.push_back(row.name);
      help += fmt::format("{}{}: {}", help.empty() ? "" : "; ", row.name, row.help);
      backend_params.insert(backend_params.end(), row.parameters.begin(), row.parameters.end());
    }
    backend_params.insert(backend_params.begin(), ParamSpec::choice("backend", names, names.front(), help));
    spec.params.insert(spec.params.begin() + 2, backend_params.begin(), backend_params.end());
    for (auto& p : resumable_sink_params()) spec.params.push_back(std::move(p));
    spec.default_endpoint = false;
    // Shards (`shards: N`): each holds the documents whose id hashes to it; a search asks every shard.
    spec.shards = std::make_shared<ShardPlan>(ShardPlan{{"/index", "/update", "/delete"}, &merge_shards});
    return spec;
  }

  // What a request may ask of /search (Jina's `parameters`); checked by the core before search() runs.
  static std::vector<EndpointParams> request_params() {
    return {{"/search",
             {ParamSpec::optional("limit", ParamType::Int, nullptr,
                                  "matches per query, at most the index's max_limit (default: its `limit`)")
                  .min(1),
              ParamSpec::optional(
                  "filter", ParamType::Json, nullptr,
                  "a condition on the documents' tags, MongoDB-style (docs/search.md); not set: every document"),
              ParamSpec::optional("return_embeddings", ParamType::Bool, nullptr,
                                  "the answer carries embeddings: each match's and the query's own (default: the "
                                  "index's `return_embeddings`)"),
              ParamSpec::optional("ef_search", ParamType::Int, nullptr,
                                  "HNSW candidates per query (default: the index's `ef_search`; other backends "
                                  "ignore it)")
                  .min(1)}}};
  }

  explicit VectorIndex(const ExecutorContext& context) : Executor(context) {
    StoreOptions options;
    options.metric = parse_metric(params().get<std::string>("metric"));
    options.dim = params().get<std::size_t>("dim");
    options.backend = params().get<std::string>("backend");
    const BackendPlan backend =
        backend_row(options.backend)
            .make(BackendSettings{params(), runtime().device, runtime().name, runtime().shards});
    options.make = backend.make;
    const c10::Device device = backend.device;
    options.snapshot_log_bytes = params().get<std::uint64_t>("snapshot_mb") << 20;
    std::string workspace = params().get<std::string>("workspace");
    if (!workspace.empty()) workspace = shard_workspace(workspace, runtime().shard, runtime().shards);
    if (!workspace.empty()) options.workspace = workspace;
    limit_ = params().get<std::size_t>("limit");
    bounds_.max_limit = params().get<std::size_t>("max_limit");
    bounds_.max_answer_matches = params().get<std::size_t>("max_answer_matches");
    bounds_.max_answer_bytes = params().get<std::size_t>("max_answer_mb") << 20;
    bounds_.filter.max_size = params().get<std::size_t>("max_filter_size");
    bounds_.filter.max_conditions = params().get<std::size_t>("max_filter_conditions");
    if (limit_ > bounds_.max_limit) {
      throw Error(fmt::format("executor '{}': limit {} is more than max_limit ({})", runtime().name, limit_,
                              bounds_.max_limit));
    }
    return_embeddings_ = params().get<bool>("return_embeddings");
    if (backend.documents) {
      serve(backend.documents(options.metric));
      return;
    }
    // The replicas of an index are copies of one store: the first replica opens it, the others share it, so
    // every replica holds every document, queries spread over them and run at once, and changes are made
    // one at a time (shared_). Copies on different devices would each need their own vectors: refused.
    const auto open = [&] {
      auto made = std::make_shared<SharedStore>();
      made->device = device;
      made->store = std::make_unique<Store>(std::move(options));
      spdlog::info("executor '{}': {} index, metric {}{}, {} documents, {}{}{}", runtime().name,
                   made->store->backend_name(), metric_name(made->store->metric()),
                   made->store->dim() ? fmt::format(", {} dimensions", made->store->dim()) : "", made->store->size(),
                   workspace.empty() ? "in memory only" : fmt::format("workspace {}", workspace),
                   runtime().replicas > 1 ? fmt::format(", shared by {} replicas", runtime().replicas) : "",
                   runtime().shards > 1 ? fmt::format(", shard {} of {}", runtime().shard, runtime().shards) : "");
      return made;
    };
    shared_ = runtime().group ? runtime().group->shared<SharedStore>(open) : open();
    if (shared_->device != device) {
      throw Error(fmt::format(
          "executor '{}': its replicas share one index on {}, but replica {} is placed on {}: put every replica "
          "on one device (devices: at the executor's level), or shard the vectors over GPUs with with.devices",
          runtime().name, shared_->device.str(), runtime().replica, device.str()));
    }
    store_ = shared_->store.get();
    // Each replica searches on a stream of its own, so that one replica's wait for its results is not a wait
    // for every replica's queued work. Changes finish on their stream before the lock is released; the
    // store's replay ran on this thread's current stream, finished here before any replica reads it.
    if (device.is_cuda()) {
      wait_for_stream(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
      stream_ = replica_stream(device);
    }
    open_progress(workspace);
    bind("/index", &VectorIndex::index);
    bind("/search", &VectorIndex::search);
    bind("/update", &VectorIndex::update);
    bind("/delete", &VectorIndex::remove);
    bind("/clear", &VectorIndex::clear);
    bind("/status", &VectorIndex::status);
  }

  void close() override {
    if (documents_) return;  // a database's rows are committed as each request is answered
    if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) {
      if (run_outcome() == RunOutcome::Complete) upsert(rest);  // else they come after a gap: a resume redoes them
    }
    const c10::OptionalStreamGuard on(stream_);
    std::unique_lock lock(shared_->mutex);
    store_->snapshot(true);
    if (!progress_.enabled() || !manifest_written_) return;  // a run that indexed nothing leaves it as it was
    // Complete: the manifest names the whole input, so a --resume of this run skips it all and exits 0.
    if (run_outcome() == RunOutcome::Complete)
      return write_sink_manifest(progress_path_, progress_.run_key(), progress_.point());
    record_progress();  // every acknowledged /index request is in the log: a --resume continues here
  }

 private:
  // A backend that keeps the documents itself (backend.hpp) answers every endpoint; /search after the checks.
  void serve(std::unique_ptr<DocumentBackend> documents) {
    documents_ = std::move(documents);
    open_progress("");  // no workspace: a --resume is refused, a fresh run keeps no progress
    bind("/search", &VectorIndex::search);
    for (const char* e : {"/index", "/update", "/delete", "/clear", "/status"})
      bind(e, [this, e](DocumentArray& docs, const RequestInfo&) { documents_->handle(e, docs); });
  }

  static Entry entry_of(const Document& doc) { return Entry{doc.id, doc.text, doc.uri, doc.tags}; }

  // Called at the end of a change, under the exclusive lock: its GPU work done before another replica reads.
  void finish_change() const {
    if (stream_) wait_for_stream(*stream_);
  }

  // A resumable sink (flowline/resumable_sink.hpp) under `flowline run`: WORKSPACE/run.resume.json names how
  // many input documents the workspace holds (every /index request's changes are in the synced log before it
  // is answered; the file is replaced every sync_every documents / sync_seconds, so it may name fewer: those
  // after it are indexed again on --resume, replacing themselves by id). One replica and one shard only. It is
  // first written by the run's first /index request (a run that only searches the workspace, flows/search.yml,
  // leaves an index run's progress as it was) and stays when the run completes, naming the whole input.
  void open_progress(const std::string& workspace) {
    if (!progress_.enabled()) return;
    if (workspace.empty() || runtime().replicas > 1 || runtime().shards > 1) {
      if (progress_.resuming()) {
        throw Error(
            fmt::format("executor '{}': --resume needs a workspace, one replica and one shard (the run "
                        "counts the documents this index holds)",
                        runtime().name));
      }
      progress_.disable();  // a fresh run of such an index keeps no progress (a --resume is refused)
      return;
    }
    progress_path_ = std::filesystem::path(workspace) / "run";
    SinkPoint held;
    if (progress_.resuming()) {
      if (auto point = read_sink_progress(progress_path_, progress_.run_key()); point && point->documents > 0) {
        if (!store_->find(point->last_id)) {
          throw Error(
              fmt::format("executor '{}': '{}' says document '{}' was indexed, but the workspace does not "
                          "hold it: not this run's workspace (refused)",
                          runtime().name, sink_manifest_path(progress_path_).string(), point->last_id));
        }
        held = *point;
      }
    }
    progress_.held(held);
    held_ = held;
  }

  void record_progress() {
    if (!progress_.unsynced()) return;
    write_sink_manifest(progress_path_, progress_.run_key(), progress_.point());
    progress_.synced();
  }

  // Batches go through order() first when the run's ids are positional (resumable_sink.hpp).
  void index(DocumentArray& docs, const RequestInfo& request) {
    if (progress_.orders(request)) return index_in_order(progress_.order(docs));
    index_in_order(docs);
  }

  void index_in_order(const DocumentArray& docs) {
    if (progress_.enabled() && !manifest_written_) {  // this run's from here on (see open_progress)
      write_sink_manifest(progress_path_, progress_.run_key(), held_);
      manifest_written_ = true;
    }
    const std::size_t held = progress_.skip(docs);
    if (held > 0) {
      DocumentArray rest(
          std::vector<Document>(docs.docs().begin() + static_cast<std::ptrdiff_t>(held), docs.docs().end()));
      upsert(rest);
    } else {
      upsert(docs);
    }
    progress_.wrote(docs);
    if (progress_.sync_due()) record_progress();
  }

  void upsert(const DocumentArray& docs) {
    if (docs.empty()) return;
    at::Tensor rows = rows_of(docs, "/index");
    const c10::OptionalStreamGuard on(stream_);
    std::unique_lock lock(shared_->mutex);
    std::vector<Entry> entries;
    entries.reserve(docs.size());
    for (const Document& doc : docs) entries.push_back(entry_of(doc));
    store_->upsert(std::move(entries), std::move(rows));
    finish_change();
    metrics().add("indexed", static_cast<double>(docs.size()));
  }

  // Changes stored documents: the fields a document carries (text, uri, tags, embedding) replace the stored
  // ones; the others stay. Every id must be in the index, or nothing changes.
  void update(DocumentArray& docs) {
    const c10::OptionalStreamGuard on(stream_);
    std::unique_lock lock(shared_->mutex);
    std::vector<std::string> missing;
    for (const Document& doc : docs) {
      if (!store_->find(doc.id)) missing.push_back(doc.id);
    }
    if (!missing.empty()) {
      throw Error(fmt::format(
          "/update: {} of {} documents are not in the index (ids {}); nothing was changed", missing.size(), docs.size(),
          fmt::join(missing.begin(),
                    missing.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(missing.size(), 10)), ", ")));
    }
    std::vector<Entry> entries;
    std::vector<at::Tensor> rows;
    for (std::size_t i = 0; i < docs.size(); ++i) {
      const Document& doc = docs[i];
      Entry e = *store_->find(doc.id);
      if (!doc.text.empty()) e.text = doc.text;
      if (!doc.uri.empty()) e.uri = doc.uri;
      if (!doc.tags.empty()) e.tags = doc.tags;
      rows.push_back(doc.embedding.defined() ? embedding_row(doc, i, "/update").to(at::kCPU, at::kFloat)
                                             : store_->vector_of(doc.id));
      entries.push_back(std::move(e));
    }
    if (!entries.empty()) store_->upsert(std::move(entries), at::stack(rows));
    finish_change();
  }

  void remove(DocumentArray& docs) {
    std::vector<std::string> ids;
    ids.reserve(docs.size());
    for (const Document& doc : docs) ids.push_back(doc.id);
    const c10::OptionalStreamGuard on(stream_);
    std::unique_lock lock(shared_->mutex);
    const std::vector<bool> found = store_->remove(ids);
    finish_change();
    for (std::size_t i = 0; i < docs.size(); ++i) docs[i].tags["deleted"] = static_cast<bool>(found[i]);
  }

  void clear(DocumentArray&) {
    const c10::OptionalStreamGuard on(stream_);
    std::unique_lock lock(shared_->mutex);
    store_->clear();
    finish_change();
  }

  // One query's matches, from the store's entries (the caller holds the store's shared lock).
  void write_matches(Document& query, const std::vector<Match>& found, const std::string& score_name,
                     bool with_embeddings) const {
    DocumentArray matches;
    matches.reserve(found.size());
    const at::Tensor rows = with_embeddings ? store_->rows_of(found) : at::Tensor();
    for (std::size_t j = 0; j < found.size(); ++j) {
      const Match& m = found[j];
      Document& match = matches.push_back(Document(Document::WithId{m.entry->id}));
      match.text = m.entry->text;
      match.uri = m.entry->uri;
      if (!m.entry->tags.empty()) match.tags = m.entry->tags;
      match.scores.emplace(score_name, m.score);
      if (with_embeddings) match.embedding = rows[static_cast<std::int64_t>(j)];
    }
    query.matches = std::move(matches);
  }

  // A request's limit within max_limit, and its answer's matches (queries x limit) within max_answer_matches:
  // checked before any work, each refusal naming the parameter and the bound.
  std::size_t checked_limit(const RequestInfo& request, std::size_t queries) const {
    const std::size_t limit = request.param_or<std::size_t>("limit", limit_);
    if (limit > bounds_.max_limit) {
      throw RequestError(fmt::format(
          "parameter 'limit': {} is more than this index's max_limit ({}): ask for fewer matches per query, or "
          "raise max_limit in the index's `with:`",
          limit, bounds_.max_limit));
    }
    if (queries * limit > bounds_.max_answer_matches) {
      throw RequestError(fmt::format(
          "/search: {} queries x limit {} = {} matches, more than this index's max_answer_matches ({}): send "
          "fewer queries per request or a smaller limit, or raise max_answer_matches in the index's `with:`",
          queries, limit, queries * limit, bounds_.max_answer_matches));
    }
    return limit;
  }

  // What the matches found would take in the answer, within max_answer_mb (checked before any is written).
  void check_answer_bytes(const std::vector<std::vector<Match>>& found, bool with_embeddings) const {
    const std::size_t row_bytes = with_embeddings ? store_->dim() * sizeof(float) : 0;
    std::size_t bytes = 0;
    for (const auto& matches : found) {
      for (const Match& m : matches) bytes += store_->answer_bytes(m.slot) + row_bytes;
    }
    if (bytes > bounds_.max_answer_bytes) {
      throw RequestError(fmt::format(
          "/search: the matches would take {:.1f} MiB (their ids, texts, uris, tags{}), more than this index's "
          "max_answer_mb ({} MiB): send fewer queries per request or a smaller limit, or raise max_answer_mb in "
          "the index's `with:`",
          static_cast<double>(bytes) / (1 << 20), with_embeddings ? " and embeddings" : "",
          bounds_.max_answer_bytes >> 20));
    }
  }

  void search(DocumentArray& docs, const RequestInfo& request) {
    if (docs.empty()) return;
    const std::size_t limit = checked_limit(request, docs.size());
    const bool with_embeddings = request.param_or<bool>("return_embeddings", return_embeddings_);
    std::optional<Filter> filter;
    const auto* asked = request.parameters.if_contains("filter");
    if (asked && !asked->is_null()) filter = Filter::parse(*asked, "parameter 'filter'", bounds_.filter);
    if (documents_) {
      documents_->search(docs, limit, filter ? asked : nullptr, with_embeddings);
      if (!with_embeddings) drop_query_embeddings(docs);
      return;
    }
    const std::size_t ef = request.param_or<std::size_t>("ef_search", 0);
    const auto started = Clock::now();
    const c10::OptionalStreamGuard on(stream_);
    at::Tensor queries = query_rows(docs, shared_->device);
    const auto gathered = Clock::now();
    std::shared_lock lock(shared_->mutex);  // matches point into the store: held until they are copied out
    const auto found = store_->search(std::move(queries), limit, filter ? &*filter : nullptr, ef);
    check_answer_bytes(found, with_embeddings);
    const auto searched = Clock::now();
    const std::string score_name = metric_name(store_->metric());
    // Matches are written on LibTorch's CPU threads, a block of queries each (the ids, texts and tags copied
    // out of the store are independent per query); with their embeddings, on this thread alone, whose device
    // and stream the store's rows are read on.
    const auto write = [&](std::int64_t first, std::int64_t end) {
      for (auto q = static_cast<std::size_t>(first); q < static_cast<std::size_t>(end); ++q) {
        write_matches(docs[q], found[q], score_name, with_embeddings);
      }
    };
    const auto n = static_cast<std::int64_t>(docs.size());
    if (with_embeddings) {
      write(0, n);
    } else {
      at::parallel_for(0, n, 64, write);
      drop_query_embeddings(docs);
    }
    // Where a request's time goes (seconds, running totals; Flow::stats() and /metrics show them): the
    // queries gathered into one matrix, the backend's search, the matches written into the documents.
    metrics().add("queries", static_cast<double>(docs.size()));
    metrics().add("gather_seconds", seconds_between(started, gathered));
    metrics().add("search_seconds", seconds_between(gathered, searched));
    metrics().add("matches_seconds", seconds_between(searched, Clock::now()));
  }

  // An answer carries the query's own embedding only when asked (return_embeddings): the client sent a text
  // and wants its matches, and a GPU row would otherwise be copied to the host and written as 384 or more
  // numbers in every answer (issue 49 §3: about half of a /search answer's bytes).
  static void drop_query_embeddings(DocumentArray& docs) {
    for (Document& doc : docs) doc.embedding = at::Tensor();
  }

  // One document whose tags describe the index (or, when the request carries documents, those tags on each).
  void status(DocumentArray& docs) {
    std::shared_lock lock(shared_->mutex);
    boost::json::object tags{{"count", store_->size()},
                             {"dimension", store_->dim()},
                             {"metric", metric_name(store_->metric())},
                             {"backend", store_->backend_name()},
                             {"where", store_->backend() ? store_->backend()->where() : std::string("(empty)")},
                             {"bytes", store_->bytes()},
                             {"workspace", store_->workspace() ? store_->workspace()->folder().string() : ""}};
    if (docs.empty()) docs.push_back(Document());
    for (Document& doc : docs) {
      for (const auto& kv : tags) doc.tags[kv.key()] = kv.value();
    }
  }

  // One store and the lock its replicas take: shared for /search and /status, exclusive for changes.
  struct SharedStore {
    std::shared_mutex mutex;
    std::unique_ptr<Store> store;
    c10::Device device{c10::kCPU};
  };

  SinkProgress progress_{params(), runtime().name};
  std::filesystem::path progress_path_;  // WORKSPACE/run: its run.resume.json
  SinkPoint held_;                       // what the workspace held at start (this run's progress)
  bool manifest_written_ = false;        // by this run (its first /index request)
  std::shared_ptr<SharedStore> shared_;
  std::unique_ptr<DocumentBackend> documents_;  // instead of shared_, with such a backend
  Store* store_ = nullptr;                      // shared_->store
  std::optional<c10::Stream> stream_;  // this replica's, on a GPU: current in every handler (OptionalStreamGuard)
  std::size_t limit_ = 10;
  struct Bounds {
    std::size_t max_limit = 0, max_answer_matches = 0, max_answer_bytes = 0;
    FilterLimits filter;
  } bounds_;  // what one /search request may ask for (with:'s max_* parameters)
  bool return_embeddings_ = false;
};

}  // namespace

void register_vector_index(Registry& registry) { registry.add<VectorIndex>("flowline::vector_index"); }

}  // namespace flowline::vector_index
