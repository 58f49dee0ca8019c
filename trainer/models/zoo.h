// zoo.h: the model constructors CreateModel dispatches to (one file each: mlp.cc, ctr.cc,
// gpt.cc). Internal to trainer/models.
#pragma once

#include <memory>

#include "trainer/models/model.h"

namespace strata {

std::unique_ptr<Model> MakeMlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build);
std::unique_ptr<Model> MakeCtrModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build);
std::unique_ptr<Model> MakeGptModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build);

}  // namespace strata
