// The rules every output of dpx follows (docs/troubleshooting.md), checked before a
// command does any work:
//  - an output path is never empty (an empty --out once meant "/", the root of the file system);
//  - an output never names an input of the same run, nor another output (--trace equal to
//    --weights replaced the weights);
//  - an existing output is replaced only when dpx wrote it as that kind of file — its signature:
//    a CSV header, a JSON key, a safetensors metadata entry, an HTML meta tag, a caption line — or
//    when the user passes --force; a folder, a FIFO, a device or a socket is never replaced;
//  - the replacement itself is atomic (core/atomic_file.hpp), so a refused, failed or stopped run
//    leaves the old file whole.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dpx {

// The kinds of file dpx writes, each known by its signature.
enum class FileKind {
  steps_csv,       // dpx train's and dpx bench's per-step records
  summary_csv,     // dpx train's summary.csv
  results_csv,     // dpx bench's results.csv
  runs_csv,        // dpx bench's runs.csv
  ops_csv,         // dpx bench --profile-ops's ops.csv
  collective_csv,  // dpx collective --csv
  models_csv,      // dpx models --csv
  predict_csv,     // dpx predict --csv
  config_json,     // dpx train's config.json
  trace_json,      // dpx train --trace
  fit_json,        // dpx fit --out
  command_txt,     // dpx bench's command.txt
  weights,         // a safetensors file dpx wrote: --save, a checkpoint, dpx infer --output
  checkpoint,      // a dpx train checkpoint (safetensors with dpx_checkpoint metadata)
  figure,          // dpx plot's STEM.png / STEM.svg: dpx's when STEM.txt beside it is its caption
  caption,         // dpx plot's STEM.txt
  report_html,     // dpx report's page
  preview_png,     // dpx data preview's grid: a PNG with the tEXt chunk Software = "dpx data preview"
};

// What a kind is called in messages ("a dpx train summary.csv").
std::string_view file_kind_name(FileKind kind);

// The metadata entry (safetensors) and JSON member (traces) that mark a file as dpx's.
inline constexpr std::string_view kGeneratorKey = "generator";
inline constexpr std::string_view kGeneratorValue = "dpx";
// The tag in the head of every page dpx report writes.
inline constexpr std::string_view kReportGeneratorTag = "<meta name=\"generator\" content=\"dpx report\">";

// Whether `path` is a regular file (not a link to one) that carries `kind`'s signature.
bool written_by_dpx(const std::string& path, FileKind kind);

// Refuses, with a usage error naming `flag`, the path and what to do, an output that cannot be
// written or replaced: an empty path; an existing folder, FIFO, device or socket; and, unless
// `force`, an existing file (or a symbolic link) without `kind`'s signature.
void check_output_file(const std::string& path, FileKind kind, std::string_view flag, bool force);

// An output folder's path: refused when empty (as any output path).
void check_output_dir_path(const std::string& dir, std::string_view flag);

// A path a run reads or writes, with the flag that named it.
struct FlagPath {
  std::string flag;
  std::string path;
};

// Refuses (usage error naming both flags) an output that is the same file as an input or as
// another output: the same path once resolved, or the same file through another name (a link).
// Empty paths are left out (an option not given).
void check_outputs_distinct(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs);

}  // namespace dpx
