// The VectorIndex's figures, through a real Flow in this process (docs/benchmarks.md, "Index and search"):
//
//   vector_index_bench --mode index  --count 1000000 --dim 384 --workspace /tmp/ws
//       documents/minute into a durable workspace (one /index request of --request documents at a time, each
//       synced before the next), the process's RSS per vector, and the restart (replay) time;
//   vector_index_bench --mode search --count 1000000 --dim 384 --backend exact --device cuda --batch 1024
//       queries/s of /search with --batch queries per request, and recall@limit against brute force in fp32
//       (--ef 64,128,256 sweeps hnsw's ef_search, a request parameter); --devices cuda:0,cuda:1 shards the exact
//       backend's vectors over those devices (the index's with.devices) instead of --device. A pass posts every
//       query at once (the flow keeps requests of --batch in flight; --replicas N copies search at once), or
//       with --one-at-a-time one request after the other. Prints where a request's time went in the index.
//
// Vectors (--vectors/--queries FILE: raw float32, row-major; else generated): 1,000 centres drawn uniformly on
// the unit sphere, each vector a random centre plus Gaussian noise of norm about 0.5 (sigma 0.5/sqrt(dim)),
// seed 1 for the vectors and 2 for the queries. --save DIR writes them (vectors.f32, queries.f32, truth.i64:
// the exact top-limit ids) for bench/index_peers.py, which runs hnswlib and FAISS on the same files.
#include "flowline/device.hpp"
#include "flowline/flow.hpp"
#include "flowline/registry.hpp"
#include "flowline/vector_index/vector_index.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <map>
#include <filesystem>
#include <stdexcept>
#include <fstream>
#include <unistd.h>

using namespace flowline;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string mode = "search";
  std::int64_t count = 100000, dim = 384, queries = 1000, batch = 1024, request = 1024, limit = 10;
  std::string backend = "exact", device = "cpu", dtype = "auto", workspace, vectors, query_file, save;
  std::vector<std::string> devices;  // the exact backend sharded over these (with.devices) instead of --device
  std::int64_t recall_queries = 0;   // recall over the first this many queries (0: all)
  std::vector<int> ef{64};
  int m = 16, ef_construction = 200, repeats = 3, snapshot_mb = 256;
  int replicas = 1;            // the index's replicas (copies of one store, searching at once)
  bool one_at_a_time = false;  // post one request and wait for it before the next (else a pass in one post())
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

at::Tensor generate(std::int64_t n, std::int64_t dim, std::uint64_t seed) {
  at::manual_seed(1000);  // the same centres for vectors and queries
  at::Tensor centres = at::randn({1000, dim});
  centres = centres / centres.norm(2, {1}, true);
  at::manual_seed(seed);
  const at::Tensor which = at::randint(1000, {n});
  return (centres.index_select(0, which) + at::randn({n, dim}) * (0.5 / std::sqrt(static_cast<double>(dim))))
      .contiguous();
}

at::Tensor read_raw(const std::string& file, std::int64_t dim) {
  const auto bytes = static_cast<std::int64_t>(fs::file_size(file));
  if (bytes % (dim * 4) != 0)
    throw std::runtime_error(fmt::format("{}: {} bytes are not rows of {} floats", file, bytes, dim));
  at::Tensor t = at::empty({bytes / (dim * 4), dim}, at::kFloat);
  std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(t.data_ptr<float>()), bytes);
  return t;
}

void write_raw(const fs::path& file, const at::Tensor& t) {
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(t.contiguous().data_ptr()), static_cast<std::streamsize>(t.nbytes()));
}

// The exact top-`limit` ids by cosine similarity, in fp32 on the CPU.
at::Tensor truth(const at::Tensor& vectors, const at::Tensor& queries, std::int64_t limit) {
  c10::InferenceMode guard;
  const at::Tensor v = vectors / vectors.norm(2, {1}, true);
  const at::Tensor q = queries / queries.norm(2, {1}, true);
  std::vector<at::Tensor> parts;
  for (std::int64_t first = 0; first < q.size(0); first += 64) {
    const at::Tensor block = q.narrow(0, first, std::min<std::int64_t>(64, q.size(0) - first));
    parts.push_back(std::get<1>(at::topk(at::mm(block, v.t()), limit, 1)));
  }
  return at::cat(parts);
}

DocumentArray documents(const at::Tensor& vectors, std::int64_t first, std::int64_t n, bool with_text) {
  DocumentArray docs;
  docs.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = first; i < first + n; ++i) {
    Document& d = docs.push_back(Document());
    d.id = std::to_string(i);
    if (with_text) {
      d.text = fmt::format("document {}", i);
      d.tags["n"] = i;
    }
    d.embedding = vectors[i];
  }
  return docs;
}

Registry& registry() {
  static Registry* r = [] {
    auto* out = new Registry();
    vector_index::register_vector_index(*out);
    return out;
  }();
  return *r;
}

Flow index_flow(const Options& o) {
  boost::json::object with{{"backend", o.backend},     {"device", o.device}, {"dtype", o.dtype},
                           {"limit", o.limit},         {"m", o.m},           {"ef_construction", o.ef_construction},
                           {"ef_search", o.ef.front()}};
  if (!o.workspace.empty()) with["workspace"] = o.workspace;
  with["snapshot_mb"] = o.snapshot_mb;
  if (!o.devices.empty()) {
    with.erase("device");
    boost::json::array devices;
    for (const auto& d : o.devices) devices.emplace_back(d);
    with["devices"] = std::move(devices);
  }
  Flow flow(FlowOptions{.request_size = static_cast<std::size_t>(o.request)}, registry());
  flow.add({.name = "index", .uses = "VectorIndex", .with = with, .replicas = o.replicas, .device = o.device});
  flow.start();
  return flow;
}

std::uint64_t status_bytes(Flow& flow) {
  DocumentArray one;
  one.push_back(Document());
  return flow.post("/status", std::move(one))[0].tags.at("bytes").to_number<std::uint64_t>();
}

// Indexes every vector, one request at a time; returns seconds.
double index_all(Flow& flow, const at::Tensor& vectors, std::int64_t request, bool with_text) {
  const auto started = Clock::now();
  for (std::int64_t first = 0; first < vectors.size(0); first += request) {
    flow.post("/index", documents(vectors, first, std::min(request, vectors.size(0) - first), with_text));
  }
  return seconds_since(started);
}

int run_index(const Options& o) {
  if (o.workspace.empty()) throw std::runtime_error("--mode index needs --workspace");
  fs::remove_all(o.workspace);
  const at::Tensor vectors = o.vectors.empty() ? generate(o.count, o.dim, 1) : read_raw(o.vectors, o.dim);
  const double rss_before = rss_mib();
  double s = 0;
  {
    Flow flow = index_flow(o);
    s = index_all(flow, vectors, o.request, true);
    const double rss_after = rss_mib();
    fmt::print(
        "index: {} documents of {} dims ({} backend, {}) in {:.1f} s: {:.0f} documents/min, {:.0f} documents/s, "
        "one request of {} synced at a time ({:.1f} syncs/s)\n",
        vectors.size(0), o.dim, o.backend, o.device, s, vectors.size(0) / s * 60, vectors.size(0) / s, o.request,
        std::ceil(static_cast<double>(vectors.size(0)) / static_cast<double>(o.request)) / s);
    fmt::print(
        "memory: RSS +{:.0f} MiB ({:.0f} bytes per document, the vectors alone {} bytes); the index's own count "
        "{:.0f} bytes per document\n",
        rss_after - rss_before, (rss_after - rss_before) * (1 << 20) / static_cast<double>(vectors.size(0)), o.dim * 4,
        static_cast<double>(status_bytes(flow)) / static_cast<double>(vectors.size(0)));
    const auto closing = Clock::now();
    flow.close();
    fmt::print("close (snapshot): {:.1f} s\n", seconds_since(closing));
  }
  std::uintmax_t on_disk = 0;
  for (const auto& entry : fs::directory_iterator(o.workspace))
    on_disk += entry.is_regular_file() ? entry.file_size() : 0;
  const auto reopening = Clock::now();
  Flow again = index_flow(o);
  fmt::print("restart: {:.1f} s to load {:.0f} MiB of workspace ({} documents)\n", seconds_since(reopening),
             static_cast<double>(on_disk) / (1 << 20), vectors.size(0));
  return 0;
}

// The index's own running totals (VectorIndex's metrics: gather_seconds, search_seconds, ...), all replicas.
std::map<std::string, double> index_totals(Flow& flow) {
  std::map<std::string, double> totals;
  for (const auto& r : flow.stats().replicas) {
    for (const auto& [name, value] : r.metrics) totals[name] += value;
  }
  return totals;
}

// Where a request's time went between two index_totals(): the queries gathered into a matrix, the backend's
// search, the matches written; the rest of a request's time is the flow's and the caller's.
void print_breakdown(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
                     double requests, double fastest_ms) {
  const auto ms = [&](const char* name) {
    const auto b = before.find(name), a = after.find(name);
    return 1e3 * ((a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second)) / requests;
  };
  fmt::print(
      "  per request: {:.2f} ms of the fastest pass's wall time; inside the index (mean per request, replicas "
      "overlap) gather {:.2f} ms, search {:.2f} ms, matches {:.2f} ms\n",
      fastest_ms, ms("gather_seconds"), ms("search_seconds"), ms("matches_seconds"));
}

int run_search(const Options& o) {
  if (!o.save.empty() && o.recall_queries > 0) {
    throw std::runtime_error("--save writes the truth of every query: leave --recall-queries out");
  }
  const at::Tensor vectors = o.vectors.empty() ? generate(o.count, o.dim, 1) : read_raw(o.vectors, o.dim);
  const at::Tensor queries = o.query_file.empty() ? generate(o.queries, o.dim, 2) : read_raw(o.query_file, o.dim);
  const auto t0 = Clock::now();
  // The truth is the CPU's fp32 product: at 10M vectors, minutes for 10,240 queries (--recall-queries samples).
  const std::int64_t judged = o.recall_queries > 0 ? std::min(o.recall_queries, queries.size(0)) : queries.size(0);
  const at::Tensor expected = truth(vectors, queries.narrow(0, 0, judged), o.limit);
  fmt::print("truth: exact fp32 top-{} of {} queries over {} vectors in {:.1f} s\n", o.limit, judged, vectors.size(0),
             seconds_since(t0));
  if (!o.save.empty()) {
    fs::create_directories(o.save);
    write_raw(fs::path(o.save) / "vectors.f32", vectors);
    write_raw(fs::path(o.save) / "queries.f32", queries);
    write_raw(fs::path(o.save) / "truth.i64", expected);
  }
  Flow flow = index_flow(o);
  const double build = index_all(flow, vectors, o.request, false);
  fmt::print(
      "{} {} on {} ({} CPU threads): built from {} vectors of {} dims in {:.1f} s ({:.0f} vectors/s); index bytes "
      "{:.0f} per vector\n",
      o.backend, o.dtype, o.device, at::get_num_threads(), vectors.size(0), o.dim, build, vectors.size(0) / build,
      static_cast<double>(status_bytes(flow)) / static_cast<double>(vectors.size(0)));
  // GPU memory as measured, not counted: the caching allocator's peak while indexing (the storage doubles as it
  // grows, so old and new are both held once), and what NVML saw the process take above its start.
  for (const auto& d : flow.stats().devices) {
    const double n = static_cast<double>(vectors.size(0));
    fmt::print(
        "GPU memory on {}: allocator peak {:.0f} MiB ({:.0f} bytes per vector); NVML peak used {:.0f} MiB "
        "above the start ({:.0f} bytes per vector, the CUDA context included)\n",
        d.device, static_cast<double>(d.peak_allocated_bytes) / (1 << 20),
        static_cast<double>(d.peak_allocated_bytes) / n,
        static_cast<double>(d.nvml_peak_used_bytes - d.nvml_used_at_start_bytes) / (1 << 20),
        static_cast<double>(d.nvml_peak_used_bytes - d.nvml_used_at_start_bytes) / n);
  }
  for (const int ef : o.ef) {
    const boost::json::object parameters{{"limit", o.limit}, {"ef_search", ef}};
    std::vector<double> rates;
    DocumentArray answers;
    const PostOptions post{.request_size = static_cast<std::size_t>(o.batch), .parameters = parameters};
    // One pass untimed first: the first searches pay for cuBLAS's set-up and the allocator's growth.
    flow.post("/search", documents(queries, 0, std::min(queries.size(0), o.batch * 4), false), post);
    const auto before = index_totals(flow);
    for (int r = 0; r < o.repeats; ++r) {
      answers = DocumentArray();
      // The query documents are made before the clock starts and the answers dropped after it stops: what a
      // client spends making and reading documents is not the index's (a gateway does it on its I/O threads).
      std::vector<DocumentArray> requests;
      const std::int64_t step = o.one_at_a_time ? o.batch : queries.size(0);
      for (std::int64_t first = 0; first < queries.size(0); first += step) {
        requests.push_back(documents(queries, first, std::min(step, queries.size(0) - first), false));
      }
      const auto started = Clock::now();
      // --one-at-a-time: one request, its answer, then the next; else the whole pass in one post(), the flow
      // keeping up to max_in_flight requests of --batch inside.
      for (DocumentArray& request : requests) answers.append(flow.post("/search", std::move(request), post));
      rates.push_back(static_cast<double>(queries.size(0)) / seconds_since(started));
    }
    std::int64_t found = 0;
    const auto* truth_ids = expected.data_ptr<std::int64_t>();
    for (std::int64_t q = 0; q < judged; ++q) {
      for (const Document& m : answers[static_cast<std::size_t>(q)].matches) {
        const std::int64_t id = std::stoll(m.id);
        for (std::int64_t j = 0; j < o.limit; ++j) found += truth_ids[q * o.limit + j] == id;
      }
    }
    std::sort(rates.begin(), rates.end());
    fmt::print(
        "search {}{}: {} queries in requests of {}: {:.0f} queries/s (median of {}; {:.0f}..{:.0f}), "
        "recall@{} {:.4f} (over {} queries)\n",
        o.backend, o.backend == "hnsw" ? fmt::format(" ef {}", ef) : "", queries.size(0), o.batch,
        rates[rates.size() / 2], rates.size(), rates.front(), rates.back(), o.limit,
        static_cast<double>(found) / static_cast<double>(judged * o.limit), judged);
    print_breakdown(before, index_totals(flow), std::ceil(static_cast<double>(queries.size(0)) / o.batch) * o.repeats,
                    1e3 * o.batch / rates.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"VectorIndex figures: indexing into a durable workspace, search speed and recall"};
  Options o;
  app.add_option("--mode", o.mode, "index or search")->check(CLI::IsMember({"index", "search"}));
  app.add_option("--count", o.count, "vectors generated");
  app.add_option("--dim", o.dim, "their dimension");
  app.add_option("--queries", o.queries, "queries generated");
  app.add_option("--batch", o.batch, "queries per /search request");
  app.add_option("--replicas", o.replicas, "the index's replicas (copies sharing one store)");
  app.add_flag("--one-at-a-time", o.one_at_a_time, "post one request of --batch, wait for it, then the next");
  app.add_option("--request", o.request, "documents per /index request");
  app.add_option("--limit", o.limit, "matches per query");
  app.add_option("--backend", o.backend, "exact or hnsw");
  app.add_option("--device", o.device, "cpu, cuda, cuda:N");
  app.add_option("--devices", o.devices, "exact: shard the vectors over these devices (cuda:0,cuda:1)")->delimiter(',');
  app.add_option("--dtype", o.dtype, "auto, fp32 or fp16 (exact)");
  app.add_option("--workspace", o.workspace, "workspace folder (index mode; emptied first)");
  app.add_option("--vectors", o.vectors, "raw float32 vectors instead of generated ones");
  app.add_option("--query-file", o.query_file, "raw float32 queries instead of generated ones");
  app.add_option("--recall-queries", o.recall_queries, "judge recall over the first N queries only (0: all)");
  app.add_option("--save", o.save, "write vectors.f32, queries.f32 and truth.i64 here");
  app.add_option("--ef", o.ef, "hnsw ef_search values to sweep")->delimiter(',');
  app.add_option("--m", o.m, "hnsw M");
  app.add_option("--ef-construction", o.ef_construction, "hnsw ef_construction");
  app.add_option("--repeats", o.repeats, "timed passes over the queries");
  app.add_option("--snapshot-mb", o.snapshot_mb, "the index's snapshot_mb (a snapshot once the log is this large)");
  CLI11_PARSE(app, argc, argv);
  // Before any tensor: at::manual_seed would look for CUDA generators, too early for a CUDA device later.
  if (o.device != "cpu") {
    if (const auto problem = load_cuda()) fmt::print(stderr, "vector_index_bench: {}\n", *problem);
  }
  try {
    return o.mode == "index" ? run_index(o) : run_search(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "vector_index_bench: {}\n", e.what());
    return 1;
  }
}
