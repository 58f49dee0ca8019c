// curve.h: ZeroMQ CURVE keys: CurveKeys (what a ZmqTransport authenticates with, a plain value),
// the key files a job names (cluster.curve.*) and reading, checking and generating them.
//
// Trust model (docs/security.md): every member of a job holds the job's server keypair (each
// member binds a socket that others connect to, and serves it with that keypair) and a client
// keypair whose public key is in the job's authorized_keys. A connection is accepted only from a
// client key listed there; a peer without CURVE, or with any other key, is refused during the
// handshake, before a message is read.
//
// Key file (text; `#` starts a comment line):
//   public <40 Z85 characters>
//   secret <40 Z85 characters>
// authorized_keys (text): one public key per line, optionally followed by a name
//   <40 Z85 characters> [name]
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

struct CurveKeypair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// What a transport authenticates with. Empty server.public_key: CURVE is off.
struct CurveKeys {
  CurveKeypair server;  // every bound (receiving) socket serves with it
  CurveKeypair client;  // every connection this process opens presents it
  std::vector<std::string> authorized;  // Z85 client public keys accepted by bound sockets
  bool enabled() const { return !server.public_key.empty(); }
};

// The key files of cluster.curve (paths relative to the working directory).
struct CurveFiles {
  std::string server_key;       // keypair shared by the job's members
  std::string client_key;       // this process's keypair
  std::string authorized_keys;  // client public keys allowed to connect
};

// Is CURVE available in the libzmq we run on (built with libsodium or tweetnacl)?
bool CurveSupported();

// Reads and checks a key file: both keys present, well formed, and the public key the secret
// key's. Errors name the file (and the line).
Result<CurveKeypair> ReadCurveKeypair(const std::string& path);
// Reads an authorized_keys file: at least one key; errors name the file and line.
Result<std::vector<std::string>> ReadAuthorizedKeys(const std::string& path);
// All three files. FailedPrecondition if libzmq lacks CURVE.
Result<CurveKeys> LoadCurveKeys(const CurveFiles& files);

// A fresh keypair (zmq_curve_keypair).
Result<CurveKeypair> NewCurveKeypair();
// The key file's text for `keys`, with a comment naming what it is.
std::string FormatCurveKeypair(const CurveKeypair& keys, const std::string& comment);
// Writes a job's keys into `dir` (created if missing): server.key, <name>.key for each client
// name, and authorized_keys listing those clients. Key files are mode 0600. AlreadyExists naming
// the file rather than overwrite one.
Status GenerateCurveKeys(const std::string& dir, const std::vector<std::string>& client_names);

}  // namespace strata
