// The output rules of core/output_files.hpp: each kind's signature, read from the first bytes of
// the file through a descriptor that follows no link and never blocks (a FIFO named as an output
// is refused, not waited on).
#include "core/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.hpp"

namespace dpx {

namespace fs = std::filesystem;

namespace {

// The first bytes of a regular file that `path` names itself (not through a link); nullopt when it
// is anything else or cannot be read.
std::optional<std::string> head_of(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  std::string head(limit, '\0');
  size_t got = 0;
  while (got < limit) {
    const ssize_t n = ::read(fd, head.data() + got, limit - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  return head;
}

bool first_line_starts(const std::string& head, std::string_view prefix) { return head.rfind(prefix, 0) == 0; }

// `"key"`, optional spaces, ':', optional spaces, then `"value` in `text` (a JSON member as
// nlohmann writes it, compact or indented).
bool has_member(std::string_view text, std::string_view key, std::string_view value) {
  const std::string quoted_key = std::string("\"").append(key).append("\"");
  for (size_t at = text.find(quoted_key); at != std::string_view::npos; at = text.find(quoted_key, at + 1)) {
    size_t i = at + quoted_key.size();
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
    if (i >= text.size() || text[i] != ':') continue;
    ++i;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
    if (text.compare(i, value.size() + 1, std::string("\"").append(value)) == 0) return true;
  }
  return false;
}

// A safetensors file whose header's metadata holds `key` = `value` (written first by dpx;
// value "" for any string).
bool dpx_safetensors(const std::string& head, std::string_view key, std::string_view value) {
  if (head.size() < 8) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[static_cast<size_t>(i)]);
  if (n < 2) return false;
  const std::string_view header = std::string_view(head).substr(8, static_cast<size_t>(std::min<uint64_t>(n, head.size() - 8)));
  return header.front() == '{' && header.find("\"__metadata__\"") != std::string_view::npos &&
         has_member(header, key, value);
}

std::string stem_of(const std::string& path) { return fs::path(path).stem().string(); }

bool is_caption_of(const std::string& path, const std::string& stem) {
  const std::optional<std::string> head = head_of(path, 4096);
  return head && first_line_starts(*head, stem + ": ");
}

}  // namespace

std::string_view file_kind_name(FileKind kind) {
  switch (kind) {
    case FileKind::steps_csv: return "a dpx steps CSV file";
    case FileKind::summary_csv: return "a dpx train summary.csv";
    case FileKind::results_csv: return "a dpx bench results.csv";
    case FileKind::runs_csv: return "a dpx bench runs.csv";
    case FileKind::ops_csv: return "a dpx bench ops.csv";
    case FileKind::collective_csv: return "a dpx collective CSV file";
    case FileKind::models_csv: return "a dpx models CSV file";
    case FileKind::predict_csv: return "a dpx predict CSV file";
    case FileKind::config_json: return "a dpx config.json";
    case FileKind::trace_json: return "a dpx trace";
    case FileKind::fit_json: return "a dpx fit file";
    case FileKind::command_txt: return "a dpx command.txt";
    case FileKind::weights: return "a safetensors file written by dpx";
    case FileKind::checkpoint: return "a dpx checkpoint";
    case FileKind::figure: return "a dpx plot figure (with its caption beside it)";
    case FileKind::caption: return "a dpx plot caption";
    case FileKind::report_html: return "a dpx report page";
    case FileKind::preview_png: return "a dpx data preview grid";
  }
  return "a dpx file";
}

bool written_by_dpx(const std::string& path, FileKind kind) {
  if (kind == FileKind::figure) {
    // STEM.png and STEM.svg are dpx's when STEM.txt beside them is dpx plot's caption of STEM.
    const std::optional<std::string> self = head_of(path, 8);
    const fs::path caption = fs::path(path).replace_extension(".txt");
    return self && is_caption_of(caption.string(), stem_of(path));
  }
  const std::optional<std::string> head = head_of(path, 65536);
  if (!head) return false;
  switch (kind) {
    case FileKind::steps_csv: return first_line_starts(*head, "rank,epoch,step,global_step,");
    case FileKind::summary_csv: return first_line_starts(*head, "model,dataset,devices,parallel,");
    case FileKind::results_csv: return first_line_starts(*head, "scaling,model,dataset,devices,");
    case FileKind::runs_csv: return first_line_starts(*head, "scaling,run,model,dataset,");
    case FileKind::ops_csv: return first_line_starts(*head, "configuration,run,op,calls,");
    case FileKind::collective_csv: return first_line_starts(*head, "collective,algo,backend,ranks,");
    case FileKind::models_csv: return first_line_starts(*head, "model,family,parameters,");
    case FileKind::predict_csv: return first_line_starts(*head, "model,algo,scaling,batch,");
    case FileKind::config_json: return first_line_starts(*head, "{") && has_member(*head, "dpx_version", "");
    case FileKind::trace_json:
      return first_line_starts(*head, "{") && has_member(*head, kGeneratorKey, kGeneratorValue);
    case FileKind::fit_json: return first_line_starts(*head, "{") && head->find("\"dpx_fit\"") != std::string::npos;
    case FileKind::command_txt: return first_line_starts(*head, "dpx ");
    case FileKind::weights: return dpx_safetensors(*head, kGeneratorKey, kGeneratorValue);
    // Checkpoints before the generator entry carried dpx_checkpoint already.
    case FileKind::checkpoint: return dpx_safetensors(*head, "dpx_checkpoint", "");
    case FileKind::caption: return first_line_starts(*head, stem_of(path) + ": ");
    case FileKind::report_html: return head->find(kReportGeneratorTag) != std::string::npos;
    case FileKind::preview_png:
      return head->rfind("\x89PNG\r\n\x1a\n", 0) == 0 &&
             head->find(std::string("tEXtSoftware") + '\0' + "dpx data preview") != std::string::npos;
    case FileKind::figure: break;
  }
  return false;
}

void check_output_dir_path(const std::string& dir, std::string_view flag) {
  if (dir.empty())
    usage_fail(flag, " is empty: name the folder to write into (\".\" for the current one)");
}

void check_output_file(const std::string& path, FileKind kind, std::string_view flag, bool force) {
  if (path.empty()) usage_fail(flag, " is empty: name the file to write");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there (or nothing visible): written new
  if (S_ISDIR(st.st_mode))
    usage_fail(flag, " '", path, "' is a folder: name a file (dpx writes ", file_kind_name(kind), ")");
  if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    usage_fail(flag, " '", path, "' is not a regular file (a FIFO, device or socket): dpx writes only regular files; "
               "name another");
  if (force || written_by_dpx(path, kind)) return;
  if (S_ISLNK(st.st_mode))
    usage_fail(flag, " '", path, "' is a symbolic link: dpx does not write through links; name the file itself, "
               "or pass --force to replace the link (its target is left alone)");
  usage_fail(flag, " '", path, "' exists and is not ", file_kind_name(kind),
             ": dpx replaces only its own files; name another, or pass --force to replace it");
}

namespace {

// Whether a and b are one file: the same inode when both exist, else the same resolved path.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a), ea), pb = fs::weakly_canonical(fs::absolute(b), eb);
  return !ea && !eb && pa == pb;
}

}  // namespace

void check_outputs_distinct(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const FlagPath& o = outputs[i];
    if (o.path.empty()) continue;
    for (const FlagPath& in : inputs)
      if (!in.path.empty() && same_file(o.path, in.path))
        usage_fail(o.flag, " '", o.path, "' is the file ", in.flag, " reads ('", in.path,
                   "'): writing it would destroy the input; name another ", o.flag);
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      const FlagPath& p = outputs[j];
      if (!p.path.empty() && same_file(o.path, p.path))
        usage_fail(o.flag, " '", o.path, "' and ", p.flag, " '", p.path,
                   "' are the same file: one output would replace the other; name two files");
    }
  }
}

}  // namespace dpx
