// mesh_comms.cc: MakeMeshComms.
#include "trainer/auto/mesh_comms.h"

#include <algorithm>

namespace strata {

CommStats MeshComms::stats() const {
  CommStats sum;
  for (const auto& c : dims) {
    if (c) sum += c->stats();
  }
  return sum;
}

Result<MeshComms> MakeMeshComms(const ProcessMesh& mesh, int mesh_rank, const std::string& prefix,
                                const CommunicatorFactory& make) {
  if (mesh_rank < 0 || mesh_rank >= mesh.size()) {
    return Status::InvalidArgument("rank " + std::to_string(mesh_rank) + " outside " +
                                   mesh.ToString());
  }
  MeshComms m;
  m.mesh = mesh;
  m.mesh_rank = mesh_rank;
  for (int d = 0; d < mesh.ndim(); ++d) {
    const std::string& dim = mesh.dims()[d].name;
    const std::vector<int> group = mesh.GroupOf(mesh_rank, dim);
    if (group.size() < 2) {
      m.dims.emplace_back();
      continue;
    }
    const int index =
        static_cast<int>(std::find(group.begin(), group.end(), mesh_rank) - group.begin());
    const std::string name = prefix + "/" + dim + "/" + std::to_string(group.front());
    Result<std::unique_ptr<Communicator>> comm = make(name, index, static_cast<int>(group.size()));
    if (!comm.ok()) return comm.status().WithContext("making the mesh group " + name);
    m.dims.push_back(std::move(*comm));
  }
  return m;
}

}  // namespace strata
