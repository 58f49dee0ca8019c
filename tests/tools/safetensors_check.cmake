# safetensors_check.cmake: a gpt trained for a few steps and checkpointed; its greedy generation
# (with logits) by strata; `strata-ckpt export --format safetensors`; an independent GPT-2
# forward in numpy on the exported file (tests/tools/gpt2_reference.py) gives the same first
# logits and the same greedy tokens; `strata-ckpt import` of the file serves the same tokens.
#   cmake -DTRAINER=<strata-trainer> -DCKPT=<strata-ckpt> -DSCRIPT=<gpt2_reference.py>
#         -DDATA=<text file> -DWORK=<directory> -P safetensors_check.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/job.yaml"
  "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 32}\n"
  "data: {kind: text, path: ${DATA}, eval_samples: 256}\n"
  "optimizer: {kind: adamw, lr: 0.003}\n"
  "train: {steps: 20, batch_size: 8, log_every: 10, progress: false, checkpoint_dir: ${WORK}/ckpt, checkpoint_every: 20}\n"
  "sync: {mode: local}\n")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}\nexited with ${rc}\n${out}\n${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()
set(generate --set infer.mode=generate --set "infer.prompts=[\"The \", \"strata is\", \"x\"]"
    --set infer.max_new_tokens=6 --set infer.save_logits=true)
set(ENV{OPENBLAS_NUM_THREADS} 1)
run("${TRAINER}" -c "${WORK}/job.yaml")
run("${TRAINER}" -c "${WORK}/job.yaml" ${generate} --set "infer.checkpoint=${WORK}/ckpt"
    --set "infer.output_path=${WORK}/strata.jsonl")
run("${CKPT}" export --format safetensors "${WORK}/ckpt" "${WORK}/model.safetensors")
if(NOT EXISTS /usr/bin/python3)
  message(FATAL_ERROR "/usr/bin/python3 is missing (scripts/setup.sh installs python3-numpy)")
endif()
run(/usr/bin/python3 "${SCRIPT}" "${WORK}/model.safetensors" "${WORK}/strata.jsonl" 4)
message(STATUS "${last_output}")
run("${CKPT}" import "${WORK}/model.safetensors" "${WORK}/imported")
run("${TRAINER}" -c "${WORK}/job.yaml" ${generate} --set "infer.checkpoint=${WORK}/imported"
    --set "infer.output_path=${WORK}/imported.jsonl")
file(READ "${WORK}/strata.jsonl" a)
file(READ "${WORK}/imported.jsonl" b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "generation from the imported file differs:\n${a}\n---\n${b}")
endif()
message(STATUS "safetensors: numpy GPT-2 agrees; import serves the same tokens and logits")
