// placement_text.h: placements and meshes as a job file writes them: "x=2,y=2" for a mesh,
// "R", "S(1)", "P(sum)" (or Paddle's "Replicate", "Shard(1)", "Partial(sum)") for a placement,
// "name=S(0),R" for a tensor's placements on every mesh dimension.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"

namespace strata {

// InvalidArgument quoting the text when it is not a mesh or a placement.
Result<ProcessMesh> ParseMesh(std::string_view text);
Result<Placement> ParsePlacement(std::string_view text);
// "name=P,P,...": the tensor's name and one placement per mesh dimension (the count is checked
// against `mesh`).
struct NamedPlacements {
  std::string name;
  std::vector<Placement> placements;
};
Result<NamedPlacements> ParseTensorPlacements(std::string_view text, const ProcessMesh& mesh);

}  // namespace strata
