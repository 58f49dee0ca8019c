// config.cc: YAML loading, --set overrides, scalar decoding and the Binder's non-template half
// (key checks, error reports, Describe's table).
#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::config {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

// Splits "a.b.c" into its keys; false if the path or any key is empty.
bool SplitKeyPath(std::string_view path, std::vector<std::string>* keys) {
  keys->clear();
  if (path.empty()) return false;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view key = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (key.empty()) return false;
    keys->emplace_back(key);
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// The keys of an error path such as "cluster.names[2]" (list indices dropped).
std::vector<std::string> ErrorPathKeys(std::string_view path) {
  std::vector<std::string> keys;
  for (size_t start = 0; start <= path.size() && !path.empty();) {
    size_t dot = std::min(path.find('.', start), path.size());
    std::string_view key = path.substr(start, dot - start);
    keys.emplace_back(key.substr(0, key.find('[')));
    start = dot + 1;
  }
  return keys;
}

bool IsPrefix(const std::vector<std::string>& prefix, const std::vector<std::string>& of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

std::string_view KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined: return "nothing";
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
  }
  return "?";
}

// A plain (unquoted) scalar's text. Quoted scalars carry the non-specific tag "!"; an explicit
// !!str counts as quoted too.
bool PlainScalar(const YAML::Node& node, std::string_view* text) {
  if (!node.IsDefined() || !node.IsScalar()) return false;
  if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return false;
  *text = node.Scalar();
  return true;
}

// Copies a tree into fresh nodes. They carry no file position (Mark), which is how Parse
// tells a value introduced by --set from one read from the file.
YAML::Node Detach(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: {
      YAML::Node copy(node.Scalar());
      copy.SetTag(node.Tag());
      return copy;
    }
    case YAML::NodeType::Sequence: {
      YAML::Node copy(YAML::NodeType::Sequence);
      for (const YAML::Node& element : node) copy.push_back(Detach(element));
      return copy;
    }
    case YAML::NodeType::Map: {
      YAML::Node copy(YAML::NodeType::Map);
      for (auto it = node.begin(); it != node.end(); ++it) {
        copy.force_insert(Detach(it->first), Detach(it->second));
      }
      return copy;
    }
    default:
      return YAML::Node(YAML::NodeType::Null);
  }
}

// Optimal string alignment distance: edits, with a transposition counting as one.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// Appends `text` wrapped to `width` columns, each line starting with `indent`.
void AppendWrapped(std::string* out, std::string_view text, size_t indent, size_t width) {
  std::string line;
  auto flush = [&] {
    out->append(indent, ' ');
    out->append(line);
    out->push_back('\n');
    line.clear();
  };
  std::istringstream words{std::string(text)};
  std::string word;
  while (words >> word) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) flush();
    if (!line.empty()) line += ' ';
    line += word;
  }
  if (!line.empty()) flush();
}

}  // namespace

// --- Files and overrides ---

Result<YAML::Node> LoadYamlFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound("no such job file: " + path);
  if (std::filesystem::is_directory(path, ec)) {
    return Status::IOError("cannot read " + path + ": it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path + ": " + std::strerror(errno));

  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text.str());
  } catch (const YAML::Exception& e) {
    std::string where = path;
    if (!e.mark.is_null()) {
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    }
    return Status::InvalidArgument(where + ": invalid YAML: " + e.msg);
  }
  if (documents.size() > 1) {
    return Status::InvalidArgument(path + ": expected one YAML document, found " +
                                   std::to_string(documents.size()));
  }
  if (documents.empty() || documents[0].IsNull()) return YAML::Node(YAML::NodeType::Map);
  return documents[0];
}

bool HasKey(const YAML::Node& root, std::string_view path) {
  std::vector<std::string> keys;
  if (!SplitKeyPath(Trim(path), &keys)) return false;
  YAML::Node node = root;
  for (const std::string& key : keys) {
    if (!node.IsMap()) return false;
    // The const operator[] looks up without inserting the key.
    const YAML::Node child = static_cast<const YAML::Node&>(node)[key];
    if (!child.IsDefined() || child.IsNull()) return false;
    node.reset(child);
  }
  return true;
}

Status ApplyOverride(YAML::Node& root, std::string_view assignment) {
  const std::string context = "--set " + std::string(assignment);
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    return Status::InvalidArgument(context + ": expected KEY=VALUE, e.g. cluster.servers=4");
  }
  std::string_view path = Trim(assignment.substr(0, eq));
  std::vector<std::string> keys;
  if (!SplitKeyPath(path, &keys)) {
    return Status::InvalidArgument(context + ": empty key in \"" + std::string(path) +
                                   "\" (expected a dotted path like cluster.servers)");
  }
  YAML::Node value;
  try {
    value = Detach(YAML::Load(std::string(assignment.substr(eq + 1))));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(context + ": the value is not valid YAML: " + e.msg);
  }

  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    return Status::InvalidArgument(context + ": the job's top level is " +
                                   std::string(KindName(root)) + ", not a mapping");
  }
  // yaml-cpp's Node::operator= writes through to the node it refers to; reset() rebinds.
  YAML::Node node = root;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node child = node[keys[i]];
    if (!child.IsDefined() || child.IsNull()) {
      child = YAML::Node(YAML::NodeType::Map);
    } else if (!child.IsMap()) {
      std::vector<std::string> prefix(keys.begin(), keys.begin() + i + 1);
      return Status::InvalidArgument(context + ": " + Join(prefix, ".") + " is " +
                                     std::string(KindName(child)) + ", not a mapping");
    }
    node.reset(child);
  }
  node[keys.back()] = value;
  return Status::OK();
}

bool IsEndpoint(std::string_view address) {
  if (address.starts_with("ipc://")) return address.size() > 6;
  if (!address.starts_with("tcp://")) return false;
  address.remove_prefix(6);
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view host = address.substr(0, colon);
  std::string_view port = address.substr(colon + 1);
  if (host.empty()) return false;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return false;
    for (char c : host.substr(1, host.size() - 2)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
  } else if (host != "*") {
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return false;
      }
    }
  }
  int port_number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  return ec == std::errc() && end == port.data() + port.size() && port_number >= 1 &&
         port_number <= 65535;
}

// --- Scalars ---

namespace detail {

bool DecodeInt64(const YAML::Node& node, int64_t min, int64_t max, int64_t* out) {
  std::string_view text;
  if (!PlainScalar(node, &text)) return false;
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return false;
  if (v < min || v > max) return false;
  *out = v;
  return true;
}

bool DecodeUint64(const YAML::Node& node, uint64_t* out) {
  std::string_view text;
  if (!PlainScalar(node, &text)) return false;
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return false;
  *out = v;
  return true;
}

bool DecodeDouble(const YAML::Node& node, double* out) {
  std::string_view text;
  if (!PlainScalar(node, &text)) return false;
  if (text.size() > 1 && text[0] == '+' && text[1] != '-') text.remove_prefix(1);
  double v = 0;
  auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return false;
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool DecodeBool(const YAML::Node& node, bool* out) {
  std::string_view text;
  if (!PlainScalar(node, &text)) return false;
  if (text == "true" || text == "True" || text == "TRUE") {
    *out = true;
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    *out = false;
    return true;
  }
  return false;
}

bool DecodeString(const YAML::Node& node, std::string* out) {
  if (!node.IsDefined() || !node.IsScalar()) return false;
  *out = node.Scalar();
  return true;
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  STRATA_CHECK(ec == std::errc());
  std::string s(buf, end);
  if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string Quote(std::string_view text) {
  constexpr size_t kMaxShown = 60;
  bool cut = text.size() > kMaxShown;
  if (cut) text = text.substr(0, kMaxShown - 3);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  out += cut ? "...\"" : "\"";
  return out;
}

}  // namespace detail

// --- Binder ---

Binder Binder::ForReading(const YAML::Node& root, std::string_view source,
                          std::span<const std::string> overrides) {
  Binder b(Mode::kRead);
  b.source_ = source.empty() ? "<input>" : std::string(source);
  for (const std::string& assignment : overrides) {
    std::vector<std::string> keys;
    size_t eq = assignment.find('=');
    if (eq != std::string::npos && SplitKeyPath(Trim(assignment.substr(0, eq)), &keys)) {
      b.overrides_.emplace_back(std::move(keys), assignment);
    }
  }
  Level level;
  if (root.IsDefined() && root.IsMap()) {
    level.has_map = true;
    level.map.reset(root);
  } else if (root.IsDefined() && !root.IsNull()) {
    b.AddError(b.Where(root, ""), "", "expected a mapping at the top level, got " + Found(root));
    return b;  // no root level: BeginRoot() is false
  }
  b.levels_.push_back(std::move(level));
  return b;
}

Binder Binder::ForDescribing() {
  Binder b(Mode::kDescribe);
  b.levels_.emplace_back();
  return b;
}

Binder Binder::ForWriting() {
  Binder b(Mode::kWrite);
  b.levels_.emplace_back();
  b.levels_.back().map = YAML::Node(YAML::NodeType::Map);
  return b;
}

std::string Binder::PathOf(std::string_view name) const {
  const std::string& prefix = levels_.back().path;
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

Binder::Declared& Binder::Declare(std::string_view name) {
  Level& level = levels_.back();
  for (const Declared& d : level.declared) {
    STRATA_CHECK(d.name != name) << "a Bind declares " << PathOf(name) << " twice";
  }
  Declared d;
  d.name = std::string(name);
  if (mode_ == Mode::kRead && level.has_map) {
    const YAML::Node& map = level.map;
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == name) {
        d.present = true;
        d.key.reset(it->first);
        d.value.reset(it->second);
        break;  // a duplicate later in the mapping is reported by CheckKeys
      }
    }
  }
  all_paths_.push_back(PathOf(name));
  level.declared.push_back(std::move(d));
  return level.declared.back();
}

bool Binder::EnterSection(std::string_view name, std::string_view doc) {
  Level level;
  level.name = std::string(name);
  level.path = PathOf(name);
  level.errors_at_entry = errors_.size();
  const Declared& d = Declare(name);
  switch (mode_) {
    case Mode::kRead:
      if (d.present) level.key.reset(d.key);
      if (d.present && d.value.IsMap()) {
        level.has_map = true;
        level.map.reset(d.value);
      } else if (d.present && !d.value.IsNull()) {
        FieldError(d, d.value, "", "expected a mapping, got " + Found(d.value));
        return false;
      }
      break;
    case Mode::kDescribe: {
      Row row;
      row.path = level.path;
      row.section = true;
      row.doc = std::string(doc);
      AddRow(std::move(row));
      break;
    }
    case Mode::kWrite:
      level.map = YAML::Node(YAML::NodeType::Map);
      break;
  }
  levels_.push_back(std::move(level));
  return true;
}

void Binder::LeaveSection() {
  Level level = std::move(levels_.back());
  levels_.pop_back();
  if (mode_ == Mode::kRead) CheckKeys(level);
  if (mode_ == Mode::kWrite) levels_.back().map[level.name] = level.map;
}

void Binder::CheckKeys(const Level& level) {
  if (!level.has_map) return;
  std::vector<std::pair<std::string, YAML::Node>> seen;
  const YAML::Node& map = level.map;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node& key = it->first;
    if (!key.IsScalar()) {
      AddError(Where(key, level.path), level.path,
               "keys must be plain names, got " + Found(key) + " as a key");
      continue;
    }
    const std::string& name = key.Scalar();
    std::string path = level.path.empty() ? name : level.path + "." + name;
    auto first = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == name; });
    if (first != seen.end()) {
      std::string text = "duplicate key";
      if (!first->second.Mark().is_null()) {
        text += " (first at line " + std::to_string(first->second.Mark().line + 1) + ")";
      }
      AddError(Where(key, path), path, text);
      continue;
    }
    seen.emplace_back(name, key);
    bool known = std::any_of(level.declared.begin(), level.declared.end(),
                             [&](const Declared& d) { return d.name == name; });
    if (known) continue;
    Error e;
    e.where = Where(key, path);
    e.path = path;
    e.unknown_key = true;
    e.key = name;
    for (const Declared& d : level.declared) e.siblings.push_back(d.name);
    errors_.push_back(std::move(e));
  }
}

std::string Binder::Where(const YAML::Node& node, std::string_view path) const {
  if (node.IsDefined() && !node.Mark().is_null()) {
    return source_ + ":" + std::to_string(node.Mark().line + 1);
  }
  // No file position: the node came from an override (or was built in code).
  std::vector<std::string> keys = ErrorPathKeys(path);
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (IsPrefix(it->first, keys) || IsPrefix(keys, it->first)) return "--set " + it->second;
  }
  return source_;
}

void Binder::AddError(std::string where, std::string path, std::string text) {
  Error e;
  e.where = std::move(where);
  e.path = std::move(path);
  e.text = std::move(text);
  errors_.push_back(std::move(e));
}

void Binder::FieldError(const Declared& field, const YAML::Node& node, std::string_view suffix,
                        std::string text) {
  std::string path = PathOf(field.name) + std::string(suffix);
  // yaml-cpp places an empty value at the next token, often the next line: the key is where
  // the reader should look.
  bool use_key = suffix.empty() && field.present && node.IsDefined() && node.IsNull() &&
                 !node.Mark().is_null();
  AddError(Where(use_key ? field.key : node, path), path, std::move(text));
}

std::string Binder::Found(const YAML::Node& node) {
  if (node.IsDefined() && node.IsScalar()) return detail::Quote(node.Scalar());
  return std::string(KindName(node));
}

std::string Binder::Suggest(std::string_view word, const std::vector<std::string>& candidates) {
  // Beyond about a third of the word, a "suggestion" is just another word.
  size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

void Binder::Require(bool ok, std::string_view field, std::string_view what) {
  if (mode_ == Mode::kWrite) return;
  const Level& level = levels_.back();
  auto d = std::find_if(level.declared.begin(), level.declared.end(),
                        [&](const Declared& x) { return x.name == field; });
  STRATA_CHECK(d != level.declared.end())
      << "Require names " << PathOf(field) << ", which is not declared above it";
  if (mode_ == Mode::kDescribe) {
    std::string path = PathOf(field);
    for (Row& row : rows_) {
      if (row.path == path) row.notes.emplace_back(what);
    }
    return;
  }
  if (ok || errors_.size() > level.errors_at_entry) return;
  // Point at the field, or else at its section's key (the reader looks there to add it).
  YAML::Node at;
  if (d->present) {
    at.reset(d->value);
  } else if (level.key.IsDefined() && !level.key.IsNull()) {
    at.reset(level.key);
  } else if (level.has_map) {
    at.reset(level.map);
  }
  std::string path = PathOf(field);
  AddError(Where(at, path), path,
           std::string(what) + ", got " + d->value_text + (d->present ? "" : " (the default)"));
}

Status Binder::Finish() {
  if (mode_ != Mode::kRead) return Status::OK();
  if (!levels_.empty()) {
    CheckKeys(levels_.back());
    levels_.pop_back();
  }
  if (errors_.empty()) return Status::OK();

  std::vector<std::string> leaves;  // last key of every declared path
  for (const std::string& p : all_paths_) leaves.push_back(p.substr(p.rfind('.') + 1));
  std::string message;
  for (const Error& e : errors_) {
    std::string text = e.text;
    if (e.unknown_key) {
      text = "unknown key";
      std::string hint = Suggest(e.key, e.siblings);
      if (hint.empty()) {
        // Maybe the right name in the wrong section: suggest the full path.
        std::string leaf = Suggest(e.key, leaves);
        for (const std::string& p : all_paths_) {
          if (!leaf.empty() && p.substr(p.rfind('.') + 1) == leaf && p != e.path) {
            hint = p;
            break;
          }
        }
      }
      if (!hint.empty()) {
        text += " (did you mean \"" + hint + "\"?)";
      } else if (!e.siblings.empty()) {
        text += " (expected one of: " + Join(e.siblings, ", ") + ")";
      }
    }
    if (!message.empty()) message += '\n';
    message += e.where + ": ";
    if (!e.path.empty()) message += e.path + ": ";
    message += text;
  }
  return Status::InvalidArgument(message);
}

std::string Binder::DescribeText() const {
  constexpr size_t kWidth = 100;
  size_t path_width = 0;
  for (const Row& row : rows_) {
    if (!row.section) path_width = std::max(path_width, row.path.size());
  }
  path_width = std::min<size_t>(path_width, 40);
  const size_t indent = 2 + path_width + 2;

  std::string out;
  for (const Row& row : rows_) {
    if (row.section) {
      if (!out.empty()) out += '\n';
      out += row.path + ": " + row.doc + "\n";
      continue;
    }
    std::string line = "  " + row.path;
    line.append(indent > line.size() + 2 ? indent - line.size() : 2, ' ');
    line += row.type + ", default " + row.default_text;
    out += line + "\n";
    std::string doc = row.doc;
    for (const std::string& note : row.notes) doc += (doc.empty() ? "" : "; ") + note;
    AppendWrapped(&out, doc, indent, kWidth);
  }
  return out;
}

YAML::Node Binder::Written() const { return levels_.front().map; }

}  // namespace strata::config
