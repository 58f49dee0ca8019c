// config_test.cc: job-file parsing (every kind of bad input names its field and line),
// --set overrides, Describe and the ToYaml -> Parse round trip.
#include "common/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/logging.h"
#include "common/options.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The common layer's sections, as a job file holds them (tools/job_config.h adds more).
struct CommonJob {
  ClusterOptions cluster;
  TransportOptions transport;
  LogOptions log;
};

void Bind(config::Binder& b, CommonJob& o) {
  b.Section("cluster", o.cluster, "cluster membership");
  b.Section("transport", o.transport, "messaging");
  b.Section("log", o.log, "logging");
}

// A struct with one field of every supported kind, to test each decoder.
enum class Mode { kBsp, kAsp, kSsp };

struct Inner {
  int depth = 2;
  std::string label = "x";
  bool operator==(const Inner&) const = default;
};

void Bind(config::Binder& b, Inner& o) {
  b.Field("depth", o.depth, "how deep").Range(0, 10);
  b.Field("label", o.label, "a label");
}

struct Kinds {
  bool flag = false;
  int count = 3;
  int64_t big = 1;
  uint64_t seed = 7;
  double rate = 0.25;
  std::string name = "job";
  std::vector<int> sizes = {1, 2};
  std::vector<std::string> tags;
  Mode mode = Mode::kBsp;
  Inner inner;
  bool operator==(const Kinds&) const = default;
};

void Bind(config::Binder& b, Kinds& o) {
  b.Field("flag", o.flag, "a switch");
  b.Field("count", o.count, "a count");
  b.Field("big", o.big, "a big number");
  b.Field("seed", o.seed, "a seed");
  b.Field("rate", o.rate, "a rate").Range(0.0, 1.0);
  b.Field("name", o.name, "a name").Check([](const std::string& s) { return !s.empty(); },
                                            "a non-empty string");
  b.Field("sizes", o.sizes, "sizes").Range(1, 1024);
  b.Field("tags", o.tags, "tags");
  b.Enum("mode", o.mode, {{"bsp", Mode::kBsp}, {"asp", Mode::kAsp}, {"ssp", Mode::kSsp}},
         "consistency");
  b.Section("inner", o.inner, "a nested section");
}

struct WithRequired {
  std::string path;
  int n = 0;
};

void Bind(config::Binder& b, WithRequired& o) {
  b.Field("path", o.path, "where").Required();
  b.Field("n", o.n, "how many");
}

// Parses `yaml` (named job.yaml in errors) after applying `overrides`.
template <class T>
Result<T> ParseText(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  YAML::Node root = YAML::Load(yaml);
  for (const std::string& o : overrides) STRATA_RETURN_IF_ERROR(config::ApplyOverride(root, o));
  return config::Parse<T>(root, "job.yaml", overrides);
}

template <class T>
std::string ErrorOf(const Result<T>& r) {
  return r.ok() ? "OK" : r.status().message();
}

std::string DataPath(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/data/config/" + name;
}

// --- Loading files ---

TEST(ConfigLoadTest, GoodFileFillsEveryField) {
  auto root = config::LoadYamlFile(DataPath("good.yaml"));
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto job = config::Parse<CommonJob>(*root, "good.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.scheduler, "tcp://10.0.0.1:7100");
  EXPECT_EQ(job->cluster.servers, 3);
  EXPECT_EQ(job->cluster.trainers, 4);
  EXPECT_EQ(job->cluster.heartbeat_interval_ms, 200);
  EXPECT_EQ(job->cluster.heartbeat_timeout_ms, 2000);
  EXPECT_EQ(job->cluster.join_timeout_ms, 30000);
  EXPECT_EQ(job->transport.request_timeout_ms, 10000);
  EXPECT_EQ(job->transport.send_hwm, 0);
  EXPECT_EQ(job->transport.recv_hwm, 500);
  EXPECT_EQ(job->transport.io_threads, 2);
  EXPECT_DOUBLE_EQ(job->transport.fault.drop_rate, 0.01);
  EXPECT_DOUBLE_EQ(job->transport.fault.delay_rate, 0.5);
  EXPECT_EQ(job->transport.fault.delay_ms, 20);
  EXPECT_EQ(job->transport.fault.seed, UINT64_MAX);
  EXPECT_EQ(job->log.level, "debug");
}

TEST(ConfigLoadTest, EmptyFileIsAllDefaults) {
  auto root = config::LoadYamlFile(DataPath("empty.yaml"));
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_TRUE(root->IsMap());
  auto job = config::Parse<CommonJob>(*root, "empty.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.servers, ClusterOptions{}.servers);
  EXPECT_EQ(job->log.level, "info");
}

TEST(ConfigLoadTest, MissingFileIsNotFoundNamingThePath) {
  auto root = config::LoadYamlFile(DataPath("no_such_file.yaml"));
  ASSERT_FALSE(root.ok());
  EXPECT_TRUE(root.status().IsNotFound()) << root.status().ToString();
  EXPECT_THAT(root.status().message(), HasSubstr("no_such_file.yaml"));
}

TEST(ConfigLoadTest, DirectoryIsIOError) {
  auto root = config::LoadYamlFile(DataPath(""));
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), StatusCode::kIOError) << root.status().ToString();
}

TEST(ConfigLoadTest, MalformedYamlNamesFileLineAndColumn) {
  auto root = config::LoadYamlFile(DataPath("malformed.yaml"));
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), StatusCode::kInvalidArgument);
  // The flow sequence opened on line 3 is still open when line 4 starts a new key.
  EXPECT_THAT(root.status().message(), HasSubstr("malformed.yaml:4:"));
  EXPECT_THAT(root.status().message(), HasSubstr("invalid YAML: end of sequence flow not found"));
}

TEST(ConfigLoadTest, SeveralDocumentsAreRejected) {
  auto root = config::LoadYamlFile(DataPath("two_documents.yaml"));
  ASSERT_FALSE(root.ok());
  EXPECT_THAT(root.status().message(), HasSubstr("expected one YAML document, found 2"));
}

// --- Bad input: every error names source, line, field path, expectation and what was found ---

TEST(ConfigParseTest, BadFileReportsEveryErrorOnePerLine) {
  auto root = config::LoadYamlFile(DataPath("bad.yaml"));
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto job = config::Parse<CommonJob>(*root, "bad.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "bad.yaml:2: cluster.scheduler: expected an endpoint like tcp://host:port or "
            "ipc:///path, got \"udp://10.0.0.1:7100\"\n"
            "bad.yaml:3: cluster.servers: expected an integer in [0, 4096], got \"abc\"\n"
            "bad.yaml:5: cluster.trainers: expected an integer in [0, 65536], got null\n"
            "bad.yaml:4: cluster.sevrers: unknown key (did you mean \"servers\"?)\n"
            "bad.yaml:7: transport.io_threads: expected an integer in [1, 64], got 100\n"
            "bad.yaml:9: transport.fault.drop_rat: unknown key (did you mean \"drop_rate\"?)\n"
            "bad.yaml:11: log.level: expected a log level: trace, debug, info, warn, error, "
            "critical or off, got \"loud\"");
}

TEST(ConfigParseTest, UnknownTopLevelKeySuggestsTheSection) {
  auto r = ParseText<CommonJob>("log:\n  level: info\nclustr:\n  servers: 2\n");
  EXPECT_EQ(ErrorOf(r), "job.yaml:3: clustr: unknown key (did you mean \"cluster\"?)");
}

TEST(ConfigParseTest, UnknownNestedKeySuggestsTheField) {
  auto r = ParseText<CommonJob>("transport:\n  fault:\n    delay_sm: 3\n");
  EXPECT_EQ(ErrorOf(r),
            "job.yaml:3: transport.fault.delay_sm: unknown key (did you mean \"delay_ms\"?)");
}

TEST(ConfigParseTest, KeyInTheWrongSectionSuggestsItsFullPath) {
  auto r = ParseText<CommonJob>("servers: 3\n");
  EXPECT_EQ(ErrorOf(r), "job.yaml:1: servers: unknown key (did you mean \"cluster.servers\"?)");
}

TEST(ConfigParseTest, UnknownKeyWithNothingCloseListsTheChoices) {
  auto r = ParseText<CommonJob>("log:\n  colour: true\n");
  EXPECT_EQ(ErrorOf(r), "job.yaml:2: log.colour: unknown key (expected one of: level)");
}

TEST(ConfigParseTest, DuplicateKeyIsAnError) {
  auto r = ParseText<CommonJob>("cluster:\n  servers: 2\n  servers: 3\n");
  EXPECT_EQ(ErrorOf(r), "job.yaml:3: cluster.servers: duplicate key (first at line 2)");
}

TEST(ConfigParseTest, TopLevelMustBeAMapping) {
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("- a\n- b\n")),
            "job.yaml:1: expected a mapping at the top level, got a sequence");
}

TEST(ConfigParseTest, SectionMustBeAMapping) {
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("cluster: [1, 2]\n")),
            "job.yaml:1: cluster: expected a mapping, got a sequence");
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("transport:\n  fault: off\n")),
            "job.yaml:2: transport.fault: expected a mapping, got \"off\"");
}

TEST(ConfigParseTest, NullSectionMeansDefaults) {
  auto r = ParseText<CommonJob>("cluster:\n  servers: 2\ntransport:\nlog:\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cluster.servers, 2);
  EXPECT_EQ(r->transport.io_threads, TransportOptions{}.io_threads);
}

TEST(ConfigParseTest, NullValueIsAnErrorAtItsKeyLine) {
  // The empty value is followed by another key: the error must point at `servers:`, not it.
  auto r = ParseText<CommonJob>("cluster:\n  servers:\n  trainers: 2\n");
  EXPECT_EQ(ErrorOf(r), "job.yaml:2: cluster.servers: expected an integer in [0, 4096], got null");
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("log:\n  level: ~\n")),
            "job.yaml:2: log.level: expected a string, got null");
}

struct BadValue {
  const char* yaml;
  const char* error;
};

TEST(ConfigParseTest, WrongTypeNamesFieldExpectationAndValue) {
  const BadValue kCases[] = {
        // bool: only true/false, not YAML 1.1's yes/no/on/off nor numbers or quoted text.
        BadValue{"flag: yes", "job.yaml:1: flag: expected true or false, got \"yes\""},
        BadValue{"flag: on", "job.yaml:1: flag: expected true or false, got \"on\""},
        BadValue{"flag: 1", "job.yaml:1: flag: expected true or false, got \"1\""},
        BadValue{"flag: \"true\"", "job.yaml:1: flag: expected true or false, got \"true\""},
        // int: decimal only, no fractions, suffixes, quotes or overflow.
        BadValue{"count: 3.5", "job.yaml:1: count: expected a 32-bit integer, got \"3.5\""},
        BadValue{"count: 12abc", "job.yaml:1: count: expected a 32-bit integer, got \"12abc\""},
        BadValue{"count: \"12\"", "job.yaml:1: count: expected a 32-bit integer, got \"12\""},
        BadValue{"count: 1e3", "job.yaml:1: count: expected a 32-bit integer, got \"1e3\""},
        BadValue{"count: 2147483648",
                 "job.yaml:1: count: expected a 32-bit integer, got \"2147483648\""},
        BadValue{"count: [1]", "job.yaml:1: count: expected a 32-bit integer, got a sequence"},
        BadValue{"count: {a: 1}", "job.yaml:1: count: expected a 32-bit integer, got a mapping"},
        BadValue{"big: 9223372036854775808",
                 "job.yaml:1: big: expected a 64-bit integer, got \"9223372036854775808\""},
        BadValue{"seed: -1", "job.yaml:1: seed: expected a non-negative 64-bit integer, got \"-1\""},
        BadValue{"seed: 18446744073709551616",
                 "job.yaml:1: seed: expected a non-negative 64-bit integer, "
                 "got \"18446744073709551616\""},
        // double: finite numbers.
        BadValue{"rate: fast", "job.yaml:1: rate: expected a number in [0.0, 1.0], got \"fast\""},
        BadValue{"rate: .nan", "job.yaml:1: rate: expected a number in [0.0, 1.0], got \".nan\""},
        BadValue{"rate: 1.5", "job.yaml:1: rate: expected a number in [0.0, 1.0], got 1.5"},
        BadValue{"rate: -0.1", "job.yaml:1: rate: expected a number in [0.0, 1.0], got -0.1"},
        // string: any scalar, but not a collection; plus its Check.
        BadValue{"name: [a]", "job.yaml:1: name: expected a string, got a sequence"},
        BadValue{"name: \"\"", "job.yaml:1: name: expected a non-empty string, got \"\""},
        // lists: a sequence, each element checked and named by index.
        BadValue{"sizes: 4",
                 "job.yaml:1: sizes: expected a sequence of 32-bit integers in [1, 1024], "
                 "got \"4\""},
        BadValue{"sizes: [4, x, 2048]",
                 "job.yaml:1: sizes[1]: expected an integer in [1, 1024], got \"x\"\n"
                 "job.yaml:1: sizes[2]: expected an integer in [1, 1024], got 2048"},
        BadValue{"tags:\n  - a\n  - {b: 1}",
                 "job.yaml:3: tags[1]: expected a string, got a mapping"},
        BadValue{"tags: a", "job.yaml:1: tags: expected a sequence of strings, got \"a\""},
        // enum: one of its names, with a suggestion.
        BadValue{"mode: bps", "job.yaml:1: mode: expected one of bsp, asp, ssp, got \"bps\" "
                              "(did you mean \"bsp\"?)"},
        BadValue{"mode: 1", "job.yaml:1: mode: expected one of bsp, asp, ssp, got \"1\""},
        // nested section fields carry the full path.
        BadValue{"inner:\n  depth: 11",
                 "job.yaml:2: inner.depth: expected an integer in [0, 10], got 11"},
  };
  for (const BadValue& c : kCases) {
    EXPECT_EQ(ErrorOf(ParseText<Kinds>(c.yaml)), c.error) << "input: " << c.yaml;
  }
}

TEST(ConfigParseTest, AcceptedSpellings) {
  auto r = ParseText<Kinds>(
      "flag: True\ncount: +5\nbig: -9223372036854775808\nseed: 18446744073709551615\n"
      "rate: 1\nname: 123\nsizes: []\ntags: [a, 'b c', \"\"]\nmode: ssp\ninner: {depth: 0}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->flag);
  EXPECT_EQ(r->count, 5);
  EXPECT_EQ(r->big, INT64_MIN);
  EXPECT_EQ(r->seed, UINT64_MAX);
  EXPECT_EQ(r->rate, 1.0);
  EXPECT_EQ(r->name, "123");
  EXPECT_TRUE(r->sizes.empty());
  EXPECT_EQ(r->tags, (std::vector<std::string>{"a", "b c", ""}));
  EXPECT_EQ(r->mode, Mode::kSsp);
  EXPECT_EQ(r->inner.depth, 0);
  EXPECT_EQ(r->inner.label, "x");  // untouched fields keep their defaults

  auto e = ParseText<Kinds>("rate: 1e-3\n");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_DOUBLE_EQ(e->rate, 0.001);
}

TEST(ConfigParseTest, LogLevelOffIsAStringNotABool) {
  auto r = ParseText<CommonJob>("log:\n  level: off\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->log.level, "off");
}

TEST(ConfigParseTest, ErrorsInSeveralSectionsAreAllReported) {
  auto r = ParseText<CommonJob>(
      "cluster:\n  servers: -1\ntransport:\n  fault:\n    drop_rate: 2\n    delay_ms: x\n");
  EXPECT_EQ(ErrorOf(r),
            "job.yaml:2: cluster.servers: expected an integer in [0, 4096], got -1\n"
            "job.yaml:5: transport.fault.drop_rate: expected a number in [0.0, 1.0], got 2.0\n"
            "job.yaml:6: transport.fault.delay_ms: expected an integer in [0, 600000], got \"x\"");
}

TEST(ConfigParseTest, SchedulerMustBeAnEndpoint) {
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("cluster:\n  scheduler: localhost:7000\n")),
            "job.yaml:2: cluster.scheduler: expected an endpoint like tcp://host:port or "
            "ipc:///path, got \"localhost:7000\"");
  EXPECT_TRUE(ParseText<CommonJob>("cluster:\n  scheduler: ipc:///tmp/strata.sock\n").ok());
}

TEST(ConfigParseTest, CrossFieldCheckNamesTheField) {
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>(
                "cluster:\n  heartbeat_interval_ms: 500\n  heartbeat_timeout_ms: 300\n")),
            "job.yaml:3: cluster.heartbeat_timeout_ms: must exceed heartbeat_interval_ms, got 300");
  // Equal is not enough either.
  EXPECT_THAT(ErrorOf(ParseText<CommonJob>(
                  "cluster:\n  heartbeat_interval_ms: 500\n  heartbeat_timeout_ms: 500\n")),
              HasSubstr("cluster.heartbeat_timeout_ms: must exceed heartbeat_interval_ms"));
  // Raising only the interval breaks the default timeout: the error says so.
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("cluster:\n  heartbeat_interval_ms: 6000\n")),
            "job.yaml:1: cluster.heartbeat_timeout_ms: must exceed heartbeat_interval_ms, "
            "got 5000 (the default)");
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("cluster:\n  servers: 0\n  trainers: 0\n")),
            "job.yaml:3: cluster.trainers: servers + trainers must be at least 1, got 0");
}

TEST(ConfigParseTest, CrossFieldCheckIsSkippedWhenItsSectionHasErrors) {
  // The interval is out of range; the timeout check would only add noise.
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("cluster:\n  heartbeat_interval_ms: 0\n"
                                         "  heartbeat_timeout_ms: 300000000\n")),
            "job.yaml:2: cluster.heartbeat_interval_ms: expected an integer in [1, 3600000], "
            "got 0\n"
            "job.yaml:3: cluster.heartbeat_timeout_ms: expected an integer in [1, 86400000], "
            "got 300000000");
}

TEST(ConfigParseTest, RequiredFieldMustBePresent) {
  EXPECT_EQ(ErrorOf(ParseText<WithRequired>("n: 2\n")),
            "job.yaml: path: missing (this field is required)");
  auto r = ParseText<WithRequired>("path: /data\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path, "/data");
}

// --- Overrides ---

TEST(ConfigOverrideTest, NestedValueReplacesTheFileValue) {
  auto r = ParseText<CommonJob>("cluster:\n  servers: 2\n  trainers: 3\n",
                                {"cluster.servers=8", "transport.fault.drop_rate=0.5"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cluster.servers, 8);
  EXPECT_EQ(r->cluster.trainers, 3);  // siblings in the file survive
  EXPECT_DOUBLE_EQ(r->transport.fault.drop_rate, 0.5);
}

TEST(ConfigOverrideTest, LaterOverrideWins) {
  auto r = ParseText<CommonJob>("", {"cluster.servers=8", " cluster.servers = 9"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cluster.servers, 9);
}

TEST(ConfigOverrideTest, ValuesAreYaml) {
  auto r = ParseText<Kinds>("", {"sizes=[4, 8]", "tags=[a, b]", "name=\"123\"",
                                 "inner={depth: 5, label: y}", "mode=asp", "flag=true"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sizes, (std::vector<int>{4, 8}));
  EXPECT_EQ(r->tags, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->name, "123");
  EXPECT_EQ(r->inner, (Inner{5, "y"}));
  EXPECT_EQ(r->mode, Mode::kAsp);
  EXPECT_TRUE(r->flag);
}

TEST(ConfigOverrideTest, OverridesANullSection) {
  auto r = ParseText<CommonJob>("transport:\n", {"transport.io_threads=4"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transport.io_threads, 4);
}

TEST(ConfigOverrideTest, CoalesceIntervalIsBounded) {
  auto r = ParseText<CommonJob>("", {"transport.coalesce_us=0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->transport.coalesce_us, 0);
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("", {"transport.coalesce_us=20000"})),
            "--set transport.coalesce_us=20000: transport.coalesce_us: expected an integer in [0, 10000], "
            "got 20000");
}

TEST(ConfigOverrideTest, UnknownKeyFromOverrideNamesTheOverride) {
  auto r = ParseText<CommonJob>("cluster:\n  servers: 2\n", {"cluster.sevrers=2"});
  EXPECT_EQ(ErrorOf(r),
            "--set cluster.sevrers=2: cluster.sevrers: unknown key (did you mean \"servers\"?)");
  // A new top-level key: the error is at the map the override created.
  EXPECT_EQ(ErrorOf(ParseText<CommonJob>("", {"clustre.servers=2"})),
            "--set clustre.servers=2: clustre: unknown key (did you mean \"cluster\"?)");
}

TEST(ConfigOverrideTest, BadValueFromOverrideNamesTheOverride) {
  auto r = ParseText<CommonJob>("cluster:\n  servers: 2\n", {"cluster.servers=abc"});
  EXPECT_EQ(ErrorOf(r),
            "--set cluster.servers=abc: cluster.servers: expected an integer in [0, 4096], "
            "got \"abc\"");
  EXPECT_EQ(ErrorOf(ParseText<Kinds>("", {"sizes=[1, 0]"})),
            "--set sizes=[1, 0]: sizes[1]: expected an integer in [1, 1024], got 0");
  EXPECT_EQ(ErrorOf(ParseText<Kinds>("", {"count="})),
            "--set count=: count: expected a 32-bit integer, got null");
}

TEST(ConfigOverrideTest, MalformedAssignmentsAreRejected) {
  YAML::Node root = YAML::Load("cluster:\n  servers: 2\n");
  Status s = config::ApplyOverride(root, "cluster.servers");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--set cluster.servers: expected KEY=VALUE, e.g. cluster.servers=4");
  for (const char* bad : {"=3", "cluster..servers=3", ".servers=3", "cluster.=3"}) {
    s = config::ApplyOverride(root, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(std::string("--set ") + bad + ": empty key")) << bad;
  }
  s = config::ApplyOverride(root, "cluster.servers=[1,");
  EXPECT_THAT(s.message(), HasSubstr("--set cluster.servers=[1,: the value is not valid YAML"));
  // Nothing was changed by the failed assignments.
  EXPECT_EQ(YAML::Dump(root), "cluster:\n  servers: 2");
}

TEST(ConfigOverrideTest, PathThroughAScalarOrSequenceIsRejected) {
  YAML::Node root = YAML::Load("cluster:\n  servers: 2\nlist: [1, 2]\n");
  Status s = config::ApplyOverride(root, "cluster.servers.count=3");
  EXPECT_EQ(s.message(), "--set cluster.servers.count=3: cluster.servers is a scalar, not a mapping");
  s = config::ApplyOverride(root, "list.x=3");
  EXPECT_EQ(s.message(), "--set list.x=3: list is a sequence, not a mapping");
  YAML::Node scalar_root = YAML::Load("3");
  s = config::ApplyOverride(scalar_root, "a=1");
  EXPECT_EQ(s.message(), "--set a=1: the job's top level is a scalar, not a mapping");
}

// --- Describe and ToYaml ---

// Every leaf path of a YAML mapping, dotted.
void LeafPaths(const YAML::Node& node, const std::string& prefix, std::vector<std::string>* out) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    std::string path = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
    if (it->second.IsMap()) {
      LeafPaths(it->second, path, out);
    } else {
      out->push_back(path);
    }
  }
}

TEST(ConfigDescribeTest, ListsEveryField) {
  std::string text = "\n" + config::Describe<CommonJob>();
  std::vector<std::string> paths;
  LeafPaths(config::ToYaml(CommonJob{}), "", &paths);
  EXPECT_EQ(paths.size(), 27u);  // update when a field is added
  for (const std::string& path : paths) {
    EXPECT_THAT(text, HasSubstr("  " + path + " ")) << "Describe misses " << path;
  }
  for (const char* section : {"cluster: ", "cluster.curve: ", "transport: ", "transport.fault: ", "log: "}) {
    EXPECT_THAT(text, HasSubstr(std::string("\n") + section)) << section;
  }
}

// Describe's text with every run of whitespace made one space, so checks ignore wrapping.
std::string Flat(const std::string& text) {
  std::istringstream in(text);
  std::string word, out;
  while (in >> word) out += (out.empty() ? "" : " ") + word;
  return out;
}

TEST(ConfigDescribeTest, ShowsTypeRangeDefaultChecksAndDoc) {
  std::string text = Flat(config::Describe<CommonJob>());
  EXPECT_THAT(text, HasSubstr("cluster.servers int in [0, 4096], default 1 "
                              "number of strata-server processes"));
  EXPECT_THAT(text, HasSubstr("cluster.scheduler string, default \"tcp://127.0.0.1:7000\""));
  EXPECT_THAT(text, HasSubstr("must be an endpoint like tcp://host:port or ipc:///path"));
  EXPECT_THAT(text, HasSubstr("cluster.heartbeat_timeout_ms int in [1, 86400000], default 5000"));
  EXPECT_THAT(text, HasSubstr("must exceed heartbeat_interval_ms"));
  EXPECT_THAT(text, HasSubstr("transport.fault.drop_rate double in [0.0, 1.0], default 0.0"));

  std::string kinds = Flat(config::Describe<Kinds>());
  EXPECT_THAT(kinds, HasSubstr("mode bsp | asp | ssp, default bsp consistency"));
  EXPECT_THAT(kinds, HasSubstr("sizes list of int, each in [1, 1024], default [1, 2] sizes"));
  EXPECT_THAT(kinds, HasSubstr("tags list of string, default [] tags"));
  EXPECT_THAT(kinds, HasSubstr("seed uint64, default 7 a seed"));
  EXPECT_THAT(kinds, HasSubstr("name string, default \"job\" a name; must be a non-empty string"));
  EXPECT_THAT(Flat(config::Describe<WithRequired>()),
              HasSubstr("path string, default (required) where"));
}

TEST(ConfigToYamlTest, DefaultsRoundTrip) {
  auto r = config::Parse<Kinds>(config::ToYaml(Kinds{}), "<defaults>");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Kinds{});
}

TEST(ConfigToYamlTest, EveryKindRoundTripsThroughText) {
  Kinds k;
  k.flag = true;
  k.count = -17;
  k.big = INT64_MIN;
  k.seed = UINT64_MAX;
  k.rate = 0.1;
  k.name = "off";  // would be a bool to a YAML 1.1 reader
  k.sizes = {1024, 1};
  k.tags = {"", "null", "123", "a: b", " lead", "~", "true"};
  k.mode = Mode::kSsp;
  k.inner = {10, "#not a comment"};
  std::string text = YAML::Dump(config::ToYaml(k));
  EXPECT_THAT(text, HasSubstr("rate: 0.1\n"));  // shortest form, not 0.10000000000000001
  auto r = config::Parse<Kinds>(YAML::Load(text), "dumped");
  ASSERT_TRUE(r.ok()) << r.status().ToString() << "\n" << text;
  EXPECT_EQ(*r, k) << text;
}

TEST(ConfigToYamlTest, CommonJobRoundTrips) {
  auto root = config::LoadYamlFile(DataPath("good.yaml"));
  ASSERT_TRUE(root.ok());
  auto job = config::Parse<CommonJob>(*root, "good.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string text = YAML::Dump(config::ToYaml(*job));
  auto again = config::Parse<CommonJob>(YAML::Load(text), "dumped");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(YAML::Dump(config::ToYaml(*again)), text);
  EXPECT_EQ(again->transport.fault.seed, UINT64_MAX);
  EXPECT_DOUBLE_EQ(again->transport.fault.drop_rate, 0.01);
}

TEST(ConfigEndpointTest, AcceptsTcpAndIpcOnly) {
  for (const char* good : {"tcp://127.0.0.1:7000", "tcp://host-1.example.com:1", "tcp://*:65535",
                           "tcp://[::1]:7000", "ipc:///tmp/x.sock", "ipc://relative"}) {
    EXPECT_TRUE(config::IsEndpoint(good)) << good;
  }
  for (const char* bad : {"", "127.0.0.1:7000", "tcp://", "tcp://host", "tcp://host:",
                          "tcp://:7000", "tcp://host:0", "tcp://host:65536", "tcp://host:7x",
                          "tcp://ho st:1", "udp://host:1", "ipc://", "tcp://[::1:7000"}) {
    EXPECT_FALSE(config::IsEndpoint(bad)) << bad;
  }
}

}  // namespace
}  // namespace strata
