// mesh_comms.h: MeshComms, one rank's communicators along each dimension of a ProcessMesh (the
// groups a placement change on that dimension runs over), made through a CommunicatorFactory as
// MakeParallelGroups makes the trainer's pp, dp and tp groups.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "trainer/comm/communicator.h"
#include "trainer/parallel/groups.h"

namespace strata {

// Non-copyable (it owns communicators); used by the one thread that issues its collectives.
struct MeshComms {
  ProcessMesh mesh = *ProcessMesh::Make({{"x", 1}});
  int mesh_rank = 0;
  // One per mesh dimension, in mesh order; null along a dimension of size 1. The communicator
  // of dimension d holds the ranks that differ from this one only in coordinate d, its rank
  // being this rank's coordinate d.
  std::vector<std::unique_ptr<Communicator>> dims;

  Communicator* dim(int d) const { return dims[d].get(); }
  // What every dimension's communicator has moved, summed.
  CommStats stats() const;
};

// The communicators of `mesh_rank` on `mesh`. Every rank of the mesh calls it with the same
// `prefix` (unique to this mesh in the job, e.g. "auto/mesh0"); group names are
// "<prefix>/<dim name>/<first mesh rank of the group>". Groups are made in mesh order on every
// rank, so no rendezvous waits on a rank that is still in another.
Result<MeshComms> MakeMeshComms(const ProcessMesh& mesh, int mesh_rank, const std::string& prefix,
                                const CommunicatorFactory& make);

}  // namespace strata
