// placement_text.cc: ParseMesh, ParsePlacement, ParseTensorPlacements.
#include "trainer/auto/placement_text.h"

#include <charconv>

namespace strata {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Splits on commas outside parentheses ("S(0),R" -> "S(0)", "R").
std::vector<std::string_view> SplitList(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      parts.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    } else if (s[i] == '(') {
      ++depth;
    } else if (s[i] == ')') {
      --depth;
    }
  }
  return parts;
}

bool ParseInt(std::string_view s, int* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The argument of "Name(arg)" when `s` is `name` or `long_name` with parentheses.
bool Call(std::string_view s, std::string_view name, std::string_view long_name,
          std::string_view* arg) {
  for (std::string_view n : {name, long_name}) {
    if (s.size() > n.size() + 1 && s.substr(0, n.size()) == n && s[n.size()] == '(' &&
        s.back() == ')') {
      *arg = Trim(s.substr(n.size() + 1, s.size() - n.size() - 2));
      return true;
    }
  }
  return false;
}

}  // namespace

Result<ProcessMesh> ParseMesh(std::string_view text) {
  std::vector<MeshDim> dims;
  for (std::string_view part : SplitList(text)) {
    const size_t eq = part.find('=');
    int size = 0;
    if (eq == std::string_view::npos || !ParseInt(Trim(part.substr(eq + 1)), &size)) {
      return Status::InvalidArgument("mesh \"" + std::string(text) +
                                     "\": each dimension is name=size, e.g. \"x=2,y=2\"");
    }
    dims.push_back({std::string(Trim(part.substr(0, eq))), size});
  }
  Result<ProcessMesh> mesh = ProcessMesh::Make(std::move(dims));
  if (!mesh.ok()) return mesh.status().WithContext("mesh \"" + std::string(text) + "\"");
  return mesh;
}

Result<Placement> ParsePlacement(std::string_view text) {
  const std::string_view s = Trim(text);
  std::string_view arg;
  if (s == "R" || s == "Replicate" || s == "Replicate()") return Placement(Replicate{});
  if (Call(s, "S", "Shard", &arg)) {
    int axis = 0;
    if (ParseInt(arg, &axis) && axis >= 0) return Placement(Shard{axis});
  } else if (Call(s, "P", "Partial", &arg) || s == "P" || s == "Partial") {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      if (arg.empty() || arg == ReduceOpName(op)) return Placement(Partial{op});
    }
  }
  return Status::InvalidArgument("placement \"" + std::string(text) +
                                 "\": expected R, S(axis) or P(sum|avg|max|min)");
}

Result<NamedPlacements> ParseTensorPlacements(std::string_view text, const ProcessMesh& mesh) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || Trim(text.substr(0, eq)).empty()) {
    return Status::InvalidArgument("\"" + std::string(text) +
                                   "\": expected tensor=placements, e.g. \"w0=S(1)\"");
  }
  NamedPlacements out{std::string(Trim(text.substr(0, eq))), {}};
  for (std::string_view part : SplitList(text.substr(eq + 1))) {
    Result<Placement> p = ParsePlacement(part);
    if (!p.ok()) return p.status().WithContext("tensor '" + out.name + "'");
    out.placements.push_back(*p);
  }
  if (static_cast<int>(out.placements.size()) != mesh.ndim()) {
    return Status::InvalidArgument("tensor '" + out.name + "': " +
                                   std::to_string(out.placements.size()) + " placements " +
                                   ToString(out.placements) + " for the " +
                                   std::to_string(mesh.ndim()) + " dimensions of " +
                                   mesh.ToString());
  }
  return out;
}

}  // namespace strata
