// The launcher's JSON files (stats_json.hpp): the shared file writer and `run --stats-json`'s document.
#include "stats_json.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_stats_json.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <fstream>

namespace flowline::cli {

void write_json_file(const std::string& path, const boost::json::value& root) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << boost::json::serialize(root) << "\n";
  if (!out) throw Error(fmt::format("cannot write '{}'", path));
}

void write_stats_json(const std::string& path, const FlowStats& stats, const PostSummary& summary,
                      std::chrono::system_clock::time_point post_ended, double after_post_seconds,
                      const std::optional<WriterStats>& writer, const boost::json::object& resume) {
  boost::json::object root = stats_json(stats);
  root.insert({{"documents", summary.documents},
               {"requests", summary.requests},
               {"failed_requests", summary.failed_requests},
               {"seconds", summary.seconds},
               {"source_seconds", summary.source_seconds},
               {"deliver_seconds", summary.deliver_seconds},
               {"post_ended_unix", std::chrono::duration<double>(post_ended.time_since_epoch()).count()},
               {"after_post_seconds", after_post_seconds}});
  if (writer) {
    root["output"] = boost::json::object{{"documents", writer->documents},
                                         {"bytes", writer->bytes},
                                         {"format_seconds", writer->format_seconds},
                                         {"write_seconds", writer->write_seconds}};
  }
  if (!resume.empty()) root["resume"] = resume;
  write_json_file(path, std::move(root));
}

}  // namespace flowline::cli
