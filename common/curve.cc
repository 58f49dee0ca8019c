// curve.cc: reading, checking and generating ZeroMQ CURVE key files.
#include "common/curve.h"

#include <fcntl.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/file.h"

namespace strata {
namespace {

constexpr size_t kZ85KeyChars = 40;

// A key in Z85 that decodes to 32 bytes.
bool WellFormedKey(const std::string& z85) {
  if (z85.size() != kZ85KeyChars) return false;
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, z85.c_str()) != nullptr;
}

std::string Where(const std::string& path, int line) { return path + ":" + std::to_string(line); }

// The lines of `text` that are not blank or comments, with their numbers, split into words.
std::vector<std::pair<int, std::vector<std::string>>> Lines(const std::string& text) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty() || w[0][0] == '#') continue;
    out.emplace_back(n, std::move(w));
  }
  return out;
}

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) {
    if (errno == EEXIST) return Status::AlreadyExists(path + " exists; not overwriting a key file");
    return Status::IOError("cannot create " + path + ": " + std::strerror(errno));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::IOError("cannot write " + path + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
  return Status::OK();
}

}  // namespace

bool CurveSupported() { return zmq_has("curve") == 1; }

Result<CurveKeypair> ReadCurveKeypair(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  CurveKeypair keys;
  for (const auto& [n, w] : Lines(text)) {
    if (w.size() != 2 || (w[0] != "public" && w[0] != "secret")) {
      return Status::InvalidArgument(Where(path, n) + ": expected \"public <key>\" or \"secret <key>\"");
    }
    if (!WellFormedKey(w[1])) {
      return Status::InvalidArgument(Where(path, n) + ": the " + w[0] + " key must be 40 Z85 characters");
    }
    std::string& slot = w[0] == "public" ? keys.public_key : keys.secret_key;
    if (!slot.empty()) return Status::InvalidArgument(Where(path, n) + ": a second " + w[0] + " key");
    slot = w[1];
  }
  if (keys.public_key.empty() || keys.secret_key.empty()) {
    return Status::InvalidArgument(path + ": a key file needs a public and a secret key (strata-node keygen "
                                          "writes them)");
  }
  char derived[kZ85KeyChars + 1];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0) {
    return Status::FailedPrecondition(path + ": cannot derive the public key: " + zmq_strerror(zmq_errno()));
  }
  if (keys.public_key != derived) {
    return Status::InvalidArgument(path + ": the public key is not the secret key's");
  }
  return keys;
}

Result<std::vector<std::string>> ReadAuthorizedKeys(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::vector<std::string> keys;
  for (const auto& [n, w] : Lines(text)) {
    if (!WellFormedKey(w[0])) {
      return Status::InvalidArgument(Where(path, n) + ": expected a public key of 40 Z85 characters, got \"" +
                                     w[0] + "\"");
    }
    keys.push_back(w[0]);
  }
  if (keys.empty()) return Status::InvalidArgument(path + ": no authorized keys (nobody could connect)");
  return keys;
}

Result<CurveKeys> LoadCurveKeys(const CurveFiles& files) {
  if (!CurveSupported()) {
    return Status::FailedPrecondition("cluster.auth: curve, but this libzmq was built without CURVE "
                                      "(zmq_has(\"curve\") is false; Debian's libzmq5 has it)");
  }
  CurveKeys keys;
  auto where = [](const char* field) { return std::string("cluster.curve.") + field; };
  auto server = ReadCurveKeypair(files.server_key);
  if (!server.ok()) return server.status().WithContext(where("server_key"));
  keys.server = *server;
  auto client = ReadCurveKeypair(files.client_key);
  if (!client.ok()) return client.status().WithContext(where("client_key"));
  keys.client = *client;
  auto authorized = ReadAuthorizedKeys(files.authorized_keys);
  if (!authorized.ok()) return authorized.status().WithContext(where("authorized_keys"));
  keys.authorized = *authorized;
  return keys;
}

Result<CurveKeypair> NewCurveKeypair() {
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::FailedPrecondition(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeypair{pub, sec};
}

std::string FormatCurveKeypair(const CurveKeypair& keys, const std::string& comment) {
  return "# " + comment + "\n# The secret key must stay private to the job's members.\npublic " + keys.public_key +
         "\nsecret " + keys.secret_key + "\n";
}

Status GenerateCurveKeys(const std::string& dir, const std::vector<std::string>& client_names) {
  if (client_names.empty()) return Status::InvalidArgument("keygen: no client names");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  STRATA_ASSIGN_OR_RETURN(CurveKeypair server, NewCurveKeypair());
  STRATA_RETURN_IF_ERROR(WriteNewFile(
      dir + "/server.key",
      FormatCurveKeypair(server, "strata CURVE server keypair: every bound socket of the job serves with it"),
      0600));
  std::string authorized = "# strata CURVE authorized_keys: client public keys allowed to connect\n";
  for (const std::string& name : client_names) {
    if (name.empty() || name.find('/') != std::string::npos || name == "server" || name == "authorized_keys") {
      return Status::InvalidArgument("keygen: bad client name \"" + name + "\"");
    }
    STRATA_ASSIGN_OR_RETURN(CurveKeypair client, NewCurveKeypair());
    STRATA_RETURN_IF_ERROR(WriteNewFile(
        dir + "/" + name + ".key", FormatCurveKeypair(client, "strata CURVE client keypair \"" + name + "\""),
        0600));
    authorized += client.public_key + " " + name + "\n";
  }
  return WriteNewFile(dir + "/authorized_keys", authorized, 0644);
}

}  // namespace strata
