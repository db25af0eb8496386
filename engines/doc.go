// Package engines holds what the inference engines that serve K3 (SGLang,
// vLLM, TensorRT-LLM, tokenspeed) make of a checkpoint, as data: rules.json,
// one rule per verdict read (or run) in an engine's loader, each with the
// engine's commit, the GPU capability it holds for, the tensor groups and
// storage forms it concerns, the outcome and the source it was read from.
//
// The package reads a checkpoint's configs and headers into facts (what
// form each tensor group is stored in, under which config convention),
// evaluates the rules over them per engine and GPU, picks the conversion an
// engine keeps most of resident, and generates docs/COMPATIBILITY.md and
// the README's table from the same rules, so the three never disagree.
package engines
