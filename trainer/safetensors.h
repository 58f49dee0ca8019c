// safetensors.h: a checkpoint's parameters as one safetensors file (the format of Hugging Face's
// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data), under PyTorch-style names, and back.
//
// gpt's parameters take GPT-2's names and layouts ("transformer.wte.weight",
// "transformer.h.<i>.attn.c_attn.weight", ... ; the block linears are [in, out] in both, as
// GPT-2's Conv1D), except the head, which PyTorch's nn.Linear stores [out, in]: "lm_head.weight"
// is strata's "gpt.head.weight" transposed. Other models keep their dotted names. Optimizer
// state is not exported.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/checkpoint.h"

namespace strata {

// strata's name -> the exported one; `transpose` says whether the 2-D tensor is transposed.
std::string ExportName(const std::string& name, bool* transpose);
// The inverse (InvalidArgument for a name no strata parameter exports to).
Result<std::string> ImportName(const std::string& name, bool* transpose);

// Writes the parameters of `reader` (every tensor but optimizer state, whole) to `path`, with
// the step in the header's __metadata__.
Status ExportSafetensors(const CheckpointReader& reader, const std::string& path);
// Reads a safetensors file of F32 tensors (as ExportSafetensors writes them) and writes it as
// `<dir>/step-<N>/` (N from its metadata, else 0) holding the parameters only: a checkpoint
// inference loads into any plan. Returns the step directory. InvalidArgument naming the file on
// a malformed header, an unknown dtype, a byte range outside the file or a size that does not
// match its shape.
Result<std::string> ImportSafetensors(const std::string& path, const std::string& dir);

}  // namespace strata
