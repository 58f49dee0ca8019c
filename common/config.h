// config.h: YAML job files bound to typed option structs. Each struct declares its fields once,
// in a free `void Bind(config::Binder&, T&)`; that one declaration drives Parse (with
// validation), Describe (--help text) and ToYaml (the effective config).
//
//   void Bind(config::Binder& b, ClusterOptions& o) {
//     b.Field("servers", o.servers, "number of server processes").Range(0, 4096);
//     b.Field("scheduler", o.scheduler, "...").Check(config::IsEndpoint, "tcp://host:port");
//     b.Enum("mode", o.mode, {{"bsp", Mode::kBsp}, {"asp", Mode::kAsp}}, "...");
//     b.Section("fault", o.fault, "fault injection");
//     b.Require(o.timeout_ms > o.interval_ms, "timeout_ms", "must exceed interval_ms");
//   }
//
// Reading rules (strict on purpose: a typo in a job file should stop the job at start, not
// silently train with a default):
// - every key must be declared by some Field/Enum/Section; unknown keys are errors, with a
//   "did you mean" suggestion;
// - a null value (`servers:` with nothing after it) is an error, never "use the default";
//   a null or absent *section* means "all defaults" (so a section whose keys are all
//   commented out stays valid);
// - integers are plain decimal scalars: 3.5, 12abc, "12" (quoted) and overflow are rejected;
// - bools are only true/false (also True/TRUE/False/FALSE, the YAML 1.2 core schema);
//   yaml-cpp's as<bool> would also take yes/no/on/off/y/n, which turns typos and words like
//   `off` into bools by accident;
// - doubles are decimal or exponent notation, finite; an integer literal is fine (1 -> 1.0);
// - strings take any scalar as written (plain or quoted), so `level: off` is the string "off".
// All errors are collected, one per line of the Status message, each naming where the value
// came from (file:line, or the --set that introduced it), the dotted field path, what was
// expected and what was found:
//   job.yaml:4: cluster.servers: expected an integer in [0, 4096], got "abc"
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/status.h"

namespace strata {
struct LogOptions;
}  // namespace strata

namespace strata::config {

class Binder;

// Reads one YAML document. A missing file is NotFound, an unreadable one IOError, a syntax
// error InvalidArgument "path:line:col: message"; an empty file is an empty mapping.
Result<YAML::Node> LoadYamlFile(const std::string& path);

// Applies "a.b.c=value" to `root`: the value is parsed as YAML (so `n=2`, `names=[a, b]`,
// `s="quoted"` all work), intermediate mappings are created, and the whole subtree at a.b.c is
// replaced. Errors (no '=', an empty path component, a path through a scalar or a sequence,
// a value that is not YAML) name the assignment. The key is not checked against any schema
// here: Parse does that, like for keys written in the file.
Status ApplyOverride(YAML::Node& root, std::string_view assignment);

// Whether `root` holds a value at the dotted path "a.b.c" (a null value counts as absent).
// Lets a caller fill in a field only where neither the file nor an override set it.
bool HasKey(const YAML::Node& root, std::string_view path);

// Validators for Check(), shared by option Binds.
// tcp://host:port (host a name, an IPv4 address, [an IPv6 address] or *; port 1-65535) or
// ipc://path.
bool IsEndpoint(std::string_view address);

namespace detail {

// Scalar decoders: false when `node` is not a plain scalar of that type (see the rules above).
bool DecodeInt64(const YAML::Node& node, int64_t min, int64_t max, int64_t* out);
bool DecodeUint64(const YAML::Node& node, uint64_t* out);
bool DecodeDouble(const YAML::Node& node, double* out);
bool DecodeBool(const YAML::Node& node, bool* out);
bool DecodeString(const YAML::Node& node, std::string* out);
// Shortest text that reads back as the same double, with ".0" added to integral values.
std::string FormatDouble(double v);
// "text" in double quotes, with quotes, backslashes and control characters escaped.
std::string Quote(std::string_view text);

// One specialisation per supported scalar type. kType names it in Describe, kNoun in errors
// ("expected a 32-bit integer"), kPlural in list errors ("expected a sequence of strings").
template <class T>
struct Codec;

template <>
struct Codec<bool> {
  static constexpr std::string_view kType = "bool", kNoun = "true or false",
                                    kPlural = "booleans";
  static bool Decode(const YAML::Node& n, bool& v) { return DecodeBool(n, &v); }
  static std::string Format(bool v) { return v ? "true" : "false"; }
};

template <>
struct Codec<int> {
  static constexpr std::string_view kType = "int", kNoun = "a 32-bit integer",
                                    kPlural = "32-bit integers";
  static bool Decode(const YAML::Node& n, int& v) {
    int64_t x;
    if (!DecodeInt64(n, INT32_MIN, INT32_MAX, &x)) return false;
    v = static_cast<int>(x);
    return true;
  }
  static std::string Format(int v) { return std::to_string(v); }
};

template <>
struct Codec<int64_t> {
  static constexpr std::string_view kType = "int64", kNoun = "a 64-bit integer",
                                    kPlural = "64-bit integers";
  static bool Decode(const YAML::Node& n, int64_t& v) {
    return DecodeInt64(n, INT64_MIN, INT64_MAX, &v);
  }
  static std::string Format(int64_t v) { return std::to_string(v); }
};

template <>
struct Codec<uint64_t> {
  static constexpr std::string_view kType = "uint64", kNoun = "a non-negative 64-bit integer",
                                    kPlural = "non-negative 64-bit integers";
  static bool Decode(const YAML::Node& n, uint64_t& v) { return DecodeUint64(n, &v); }
  static std::string Format(uint64_t v) { return std::to_string(v); }
};

template <>
struct Codec<double> {
  static constexpr std::string_view kType = "double", kNoun = "a number", kPlural = "numbers";
  static bool Decode(const YAML::Node& n, double& v) { return DecodeDouble(n, &v); }
  static std::string Format(double v) { return FormatDouble(v); }
};

template <>
struct Codec<std::string> {
  static constexpr std::string_view kType = "string", kNoun = "a string", kPlural = "strings";
  static bool Decode(const YAML::Node& n, std::string& v) { return DecodeString(n, &v); }
  static std::string Format(const std::string& v) { return v; }
};

template <class T>
struct ElementOf {
  using type = T;
  static constexpr bool kIsList = false;
};
template <class E>
struct ElementOf<std::vector<E>> {
  using type = E;
  static constexpr bool kIsList = true;
};

template <class T>
inline constexpr bool kIsNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

}  // namespace detail

template <class T>
class FieldDecl;

// Walks the Bind functions in one of three modes. Option Binds only call the declaration
// methods (Field, Enum, Section, Require); Parse, Describe and ToYaml drive it.
// Not thread-safe; one Binder per Parse/Describe/ToYaml call.
class Binder {
 public:
  enum class Mode { kRead, kDescribe, kWrite };

  Binder(const Binder&) = delete;
  Binder& operator=(const Binder&) = delete;
  Binder(Binder&&) = default;
  Binder& operator=(Binder&&) = default;

  // --- Declarations (what option Binds call) ---

  // Declares a scalar or list field: bool, int, int64_t, uint64_t, double, std::string, or a
  // std::vector of those.
  template <class T>
  FieldDecl<T> Field(std::string_view name, T& value, std::string_view doc) {
    static_assert(!std::is_enum_v<T>, "use Binder::Enum for enums");
    return FieldDecl<T>(*this, name, value, doc);
  }

  // Declares an enum field written as one of the names in `choices`.
  template <class E>
    requires std::is_enum_v<E>
  FieldDecl<E> Enum(std::string_view name, E& value,
                    std::initializer_list<std::pair<std::string_view, std::type_identity_t<E>>>
                        choices,
                    std::string_view doc) {
    std::vector<std::pair<std::string, E>> named;
    for (const auto& [choice_name, choice] : choices) named.emplace_back(choice_name, choice);
    return FieldDecl<E>(*this, name, value, doc, std::move(named));
  }

  // Declares a nested mapping bound by `Bind(*this, section)` (found by argument-dependent
  // lookup, so it lives in the struct's namespace).
  template <class S>
  void Section(std::string_view name, S& section, std::string_view doc) {
    if (EnterSection(name, doc)) {
      Bind(*this, section);
      LeaveSection();
    }
  }

  // A cross-field check on values declared above it in the same Bind: when `ok` is false the
  // error is reported at `field` (a name declared in this Bind) as "<path>: <what>, got <v>".
  // Skipped when the section already has errors, whose fix might satisfy it.
  void Require(bool ok, std::string_view field, std::string_view what);

  // --- Drivers (Parse, Describe and ToYaml below; option Binds never call these) ---

  static Binder ForReading(const YAML::Node& root, std::string_view source,
                           std::span<const std::string> overrides);
  static Binder ForDescribing();
  static Binder ForWriting();
  Mode mode() const { return mode_; }
  // Reading: false if the root is not a mapping (an error is recorded); Bind must be skipped.
  bool BeginRoot() const { return !levels_.empty(); }
  // Reading: every error, one per line, or OK. Other modes: OK.
  Status Finish();
  std::string DescribeText() const;
  YAML::Node Written() const;

 private:
  template <class T>
  friend class FieldDecl;

  struct Declared {
    std::string name;
    bool present = false;   // reading: the key is in the mapping
    YAML::Node key, value;  // reading: valid when present
    std::string value_text;  // reading: the value after reading, for Require's message
  };
  struct Level {
    std::string name;      // "fault"; empty at the root
    std::string path;      // "cluster.fault"; empty at the root
    bool has_map = false;  // reading: a mapping is present at this path
    YAML::Node key;        // reading: the section's key in its parent, when present
    YAML::Node map;        // reading: the input mapping; writing: the output mapping
    std::vector<Declared> declared;
    size_t errors_at_entry = 0;
  };
  struct Error {
    std::string where, path, text;
    // Unknown keys get their suggestion in Finish, once every section has been declared.
    bool unknown_key = false;
    std::string key;
    std::vector<std::string> siblings;
  };
  struct Row {  // Describe
    std::string path;
    bool section = false;
    std::string type, default_text;
    std::string doc;
    std::vector<std::string> notes;
  };

  explicit Binder(Mode mode) : mode_(mode) {}

  std::string PathOf(std::string_view name) const;
  // Registers `name` in the current level (aborts if Bind declares it twice) and, reading,
  // finds it in the mapping.
  Declared& Declare(std::string_view name);
  bool EnterSection(std::string_view name, std::string_view doc);
  void LeaveSection();
  // Reading: checks the current mapping's keys (unknown, duplicate, non-scalar).
  void CheckKeys(const Level& level);

  // Where an error at `path` is reported: the node's file line, or the --set that produced
  // it, or just the source.
  std::string Where(const YAML::Node& node, std::string_view path) const;
  void AddError(std::string where, std::string path, std::string text);
  // Records "where: path: text" for the field `name` (+ `suffix` such as "[2]").
  void FieldError(const Declared& field, const YAML::Node& node, std::string_view suffix,
                  std::string text);
  // What a node holds, for "got ...": "abc" quoted, null, a sequence, a mapping.
  static std::string Found(const YAML::Node& node);
  static std::string Suggest(std::string_view word, const std::vector<std::string>& candidates);

  void AddRow(Row row) { rows_.push_back(std::move(row)); }

  Mode mode_;
  std::string source_;
  std::vector<std::pair<std::vector<std::string>, std::string>> overrides_;  // path, assignment
  std::vector<Level> levels_;
  std::vector<Error> errors_;
  std::vector<std::string> all_paths_;  // every declared path, for cross-section suggestions
  std::vector<Row> rows_;
};

// One field being declared: returned by Binder::Field/Enum so modifiers can be chained, and
// acted on (read, described or written) when the declaration's full expression ends.
template <class T>
class FieldDecl {
 public:
  using Element = typename detail::ElementOf<T>::type;  // T, or E for std::vector<E>

  FieldDecl(const FieldDecl&) = delete;
  FieldDecl& operator=(const FieldDecl&) = delete;
  ~FieldDecl();

  // Inclusive bounds; for a list, on each element.
  FieldDecl& Range(Element lo, Element hi)
    requires detail::kIsNumber<Element>
  {
    STRATA_CHECK(lo <= hi) << "empty range for " << name_;
    has_range_ = true;
    lo_ = lo;
    hi_ = hi;
    return *this;
  }
  // `pred(value)` must hold; `expected` completes "expected ..." in the error and is shown in
  // Describe, e.g. Check(IsEndpoint, "an endpoint like tcp://host:port or ipc://path").
  template <class Pred>
  FieldDecl& Check(Pred pred, std::string_view expected) {
    checks_.push_back({std::function<bool(const T&)>(std::move(pred)), std::string(expected)});
    return *this;
  }
  // Absence is an error instead of keeping the default.
  FieldDecl& Required() {
    required_ = true;
    return *this;
  }

 private:
  friend class Binder;

  FieldDecl(Binder& binder, std::string_view name, T& value, std::string_view doc,
            std::vector<std::pair<std::string, Element>> choices = {})
      : binder_(binder), name_(name), value_(value), doc_(doc), choices_(std::move(choices)) {}

  void Read();
  bool ReadElement(const Binder::Declared& field, const YAML::Node& node, std::string_view suffix,
                   Element& out);
  std::string TypeText() const;
  std::string RangeText() const;
  std::string Expectation() const;         // of the whole value, e.g. "a sequence of strings"
  std::string ElementExpectation() const;  // of one element (the value itself for non-lists)
  std::string ElementDisplay(const Element& e) const;
  std::string Display(const T& v) const;
  YAML::Node ElementEncode(const Element& e) const;
  YAML::Node Encode(const T& v) const;

  Binder& binder_;
  std::string_view name_;  // the caller's strings outlive this end-of-statement temporary
  T& value_;
  std::string_view doc_;
  std::vector<std::pair<std::string, Element>> choices_;  // enums only
  bool has_range_ = false;
  Element lo_{}, hi_{};
  std::vector<std::pair<std::function<bool(const T&)>, std::string>> checks_;
  bool required_ = false;
};

// Reads a T from `root`, starting from T's defaults. `source` names the file in errors;
// `overrides` are the assignments applied to root with ApplyOverride, so that an error in a
// value they introduced names the --set instead of the file.
template <class T>
Result<T> Parse(const YAML::Node& root, std::string_view source,
                std::span<const std::string> overrides = {}) {
  T value{};
  Binder b = Binder::ForReading(root, source, overrides);
  if (b.BeginRoot()) Bind(b, value);
  STRATA_RETURN_IF_ERROR(b.Finish());
  return value;
}

// Every field of T: dotted path, type (or enum choices) and range, default, checks and doc.
template <class T>
std::string Describe() {
  T defaults{};
  Binder b = Binder::ForDescribing();
  Bind(b, defaults);
  return b.DescribeText();
}

// The YAML mapping that Parse would read back as `value`.
template <class T>
YAML::Node ToYaml(const T& value) {
  T copy = value;  // Bind takes T& because reading writes through the same declaration
  Binder b = Binder::ForWriting();
  Bind(b, copy);
  return b.Written();
}

// --- FieldDecl implementation ---

template <class T>
FieldDecl<T>::~FieldDecl() {
  switch (binder_.mode()) {
    case Binder::Mode::kRead:
      Read();
      break;
    case Binder::Mode::kDescribe: {
      binder_.Declare(name_);
      Binder::Row row;
      row.path = binder_.PathOf(name_);
      row.type = TypeText();
      row.default_text = required_ ? "(required)" : Display(value_);
      row.doc = std::string(doc_);
      for (const auto& check : checks_) row.notes.push_back("must be " + check.second);
      binder_.AddRow(std::move(row));
      break;
    }
    case Binder::Mode::kWrite:
      binder_.Declare(name_);
      binder_.levels_.back().map[std::string(name_)] = Encode(value_);
      break;
  }
}

template <class T>
void FieldDecl<T>::Read() {
  Binder::Declared& field = binder_.Declare(name_);
  if (!field.present) {
    if (required_) binder_.FieldError(field, field.key, "", "missing (this field is required)");
    field.value_text = Display(value_);
    return;
  }
  const YAML::Node& node = field.value;
  T parsed{};
  bool ok = true;
  if constexpr (detail::ElementOf<T>::kIsList) {
    if (!node.IsSequence()) {
      binder_.FieldError(field, node, "",
                         "expected " + Expectation() + ", got " + Binder::Found(node));
      return;
    }
    size_t i = 0;
    for (const YAML::Node& element : node) {
      Element e{};
      if (ReadElement(field, element, "[" + std::to_string(i++) + "]", e)) {
        parsed.push_back(std::move(e));
      } else {
        ok = false;
      }
    }
  } else {
    ok = ReadElement(field, node, "", parsed);
  }
  if (!ok) return;
  for (const auto& [pred, expected] : checks_) {
    if (!pred(parsed)) {
      binder_.FieldError(field, node, "", "expected " + expected + ", got " + Display(parsed));
      return;
    }
  }
  value_ = std::move(parsed);
  field.value_text = Display(value_);
}

template <class T>
bool FieldDecl<T>::ReadElement(const Binder::Declared& field, const YAML::Node& node,
                               std::string_view suffix, Element& out) {
  bool decoded = false;
  if constexpr (std::is_enum_v<Element>) {
    std::string text;
    if (detail::DecodeString(node, &text)) {
      for (const auto& [choice_name, choice] : choices_) {
        if (choice_name == text) {
          out = choice;
          decoded = true;
        }
      }
      if (!decoded) {
        std::vector<std::string> names;
        for (const auto& choice : choices_) names.push_back(choice.first);
        std::string hint = Binder::Suggest(text, names);
        binder_.FieldError(field, node, suffix,
                           "expected " + ElementExpectation() + ", got " + Binder::Found(node) +
                               (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
        return false;
      }
    }
  } else {
    decoded = detail::Codec<Element>::Decode(node, out);
  }
  if (!decoded) {
    binder_.FieldError(field, node, suffix,
                       "expected " + ElementExpectation() + ", got " + Binder::Found(node));
    return false;
  }
  if constexpr (detail::kIsNumber<Element>) {
    if (has_range_ && !(lo_ <= out && out <= hi_)) {
      binder_.FieldError(field, node, suffix,
                         "expected " + ElementExpectation() + ", got " + ElementDisplay(out));
      return false;
    }
  }
  return true;
}

template <class T>
std::string FieldDecl<T>::RangeText() const {
  if constexpr (detail::kIsNumber<Element>) {
    if (has_range_) {
      return "in [" + detail::Codec<Element>::Format(lo_) + ", " +
             detail::Codec<Element>::Format(hi_) + "]";
    }
  }
  return "";
}

template <class T>
std::string FieldDecl<T>::TypeText() const {
  std::string type;
  if constexpr (std::is_enum_v<Element>) {
    for (const auto& choice : choices_) type += (type.empty() ? "" : " | ") + choice.first;
  } else {
    type = std::string(detail::Codec<Element>::kType);
  }
  if (detail::ElementOf<T>::kIsList) type = "list of " + type;
  std::string range = RangeText();
  if (!range.empty()) type += (detail::ElementOf<T>::kIsList ? ", each " : " ") + range;
  return type;
}

template <class T>
std::string FieldDecl<T>::ElementExpectation() const {
  if constexpr (std::is_enum_v<Element>) {
    std::string s = "one of";
    for (size_t i = 0; i < choices_.size(); ++i) s += (i ? ", " : " ") + choices_[i].first;
    return s;
  } else {
    if constexpr (detail::kIsNumber<Element>) {
      if (has_range_) {
        return (std::is_floating_point_v<Element> ? "a number " : "an integer ") + RangeText();
      }
    }
    return std::string(detail::Codec<Element>::kNoun);
  }
}

template <class T>
std::string FieldDecl<T>::Expectation() const {
  if constexpr (detail::ElementOf<T>::kIsList) {
    std::string s = "a sequence of ";
    if constexpr (std::is_enum_v<Element>) {
      s += "names (" + ElementExpectation() + ")";
    } else {
      s += detail::Codec<Element>::kPlural;
      std::string range = RangeText();
      if (!range.empty()) s += " " + range;
    }
    return s;
  } else {
    return ElementExpectation();
  }
}

template <class T>
std::string FieldDecl<T>::ElementDisplay(const Element& e) const {
  if constexpr (std::is_enum_v<Element>) {
    for (const auto& choice : choices_) {
      if (choice.second == e) return choice.first;
    }
    return "<unnamed value " + std::to_string(static_cast<int64_t>(e)) + ">";
  } else if constexpr (std::is_same_v<Element, std::string>) {
    return detail::Quote(e);
  } else {
    return detail::Codec<Element>::Format(e);
  }
}

template <class T>
std::string FieldDecl<T>::Display(const T& v) const {
  if constexpr (detail::ElementOf<T>::kIsList) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + ElementDisplay(v[i]);
    return s + "]";
  } else {
    return ElementDisplay(v);
  }
}

template <class T>
YAML::Node FieldDecl<T>::ElementEncode(const Element& e) const {
  if constexpr (std::is_enum_v<Element>) {
    for (const auto& choice : choices_) {
      if (choice.second == e) return YAML::Node(choice.first);
    }
    STRATA_CHECK(false) << binder_.PathOf(name_) << " holds an enum value with no name in its Bind";
    return {};
  } else {
    return YAML::Node(detail::Codec<Element>::Format(e));
  }
}

template <class T>
YAML::Node FieldDecl<T>::Encode(const T& v) const {
  if constexpr (detail::ElementOf<T>::kIsList) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (const auto& e : v) list.push_back(ElementEncode(e));
    list.SetStyle(YAML::EmitterStyle::Flow);
    return list;
  } else {
    return ElementEncode(v);
  }
}

}  // namespace strata::config

namespace strata {
// Declared here rather than in logging.h, which does not know the config layer; defined in
// options.cc beside the other common-layer Binds.
void Bind(config::Binder& b, LogOptions& o);
}  // namespace strata
