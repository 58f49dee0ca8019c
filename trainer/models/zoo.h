// zoo.h: the model constructors CreateModel dispatches to (one file each: mlp.cc, ctr.cc,
// gpt.cc). Internal to trainer/models.
#pragma once

#include <memory>

#include "trainer/models/model.h"

namespace strata {

// `t` viewed with another shape of the same size (a mismatch is a bug: aborts).
inline Tensor Reshaped(const Tensor& t, Shape shape) {
  Result<Tensor> r = t.Reshape(std::move(shape));
  STRATA_CHECK(r.ok()) << r.status().ToString();
  return *std::move(r);
}

std::unique_ptr<Model> MakeMlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build,
                                    nn::TpGroup tp);
std::unique_ptr<Model> MakeCtrModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build);
std::unique_ptr<Model> MakeGptModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build,
                                    nn::TpGroup tp, nn::CpGroup cp = {});

}  // namespace strata
