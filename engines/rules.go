package engines

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/k3ckpt/k3ckpt/model"
)

// GPU is a CUDA compute capability class an engine's code tests for.
type GPU string

// The GPUs K3 is served on.
const (
	sM90  GPU = "sm90"  // Hopper (H100, H200)
	sM100 GPU = "sm100" // Blackwell (B200, B300, GB200, GB300)
)

// gPUs lists the capability classes every verdict is given for.
var gPUs = []GPU{sM90, sM100}

// Outcome is what an engine does with a tensor group (or a checkpoint).
type Outcome string

// Outcomes, from best to worst.
const (
	Resident    Outcome = "resident"    // loaded and kept in its stored format (FP8, NVFP4, MXFP4, BF16)
	dequantized Outcome = "dequantized" // loaded, but turned into BF16 at load (saves disk, not GPU memory)
	Unknown     Outcome = "unknown"     // no rule covers it (the code path was not found or not read)
	wrong       Outcome = "wrong"       // loads without an error, but the weights are read wrongly
	refused     Outcome = "refused"     // the engine stops with an error
)

var outcomeRank = map[Outcome]int{Resident: 0, dequantized: 1, Unknown: 2, wrong: 3, refused: 4}

// worse reports whether a is worse than b.
func worse(a, b Outcome) bool { return outcomeRank[a] > outcomeRank[b] }

// Fails reports whether the outcome means the checkpoint is not served as it is.
func (o Outcome) Fails() bool { return o == wrong || o == refused }

// source is where a rule was read: a file and function at a commit, or a PR.
type source struct {
	Repo     string `json:"repo"`
	Commit   string `json:"commit,omitempty"`
	Path     string `json:"path,omitempty"`
	Function string `json:"function,omitempty"`
	// PR names a pull request (#N) when the rule rests on one.
	PR string `json:"pr,omitempty"`
}

// cite cites the source in one line.
func (s source) cite() string {
	c := s.Repo + s.PR
	if s.Path != "" {
		c += " " + s.Path
	}
	if s.Commit != "" {
		c += " @" + s.Commit
	}
	if s.Function != "" {
		c += " " + s.Function
	}
	return c
}

// cond names tensor groups and the forms they must be stored in.
type cond struct {
	Groups []string `json:"groups"`
	Forms  []form   `json:"forms"`
}

// rule is one verdict of one engine: for checkpoints of the conventions on
// the GPUs, the groups stored in the forms (and scale layouts, and declared
// algorithms) have Outcome. A rule without groups is about the whole
// checkpoint (a capability check).
type rule struct {
	ID          string       `json:"id"`
	Engine      string       `json:"engine"`
	Version     string       `json:"version"`
	GPUs        []GPU        `json:"gpus"`
	Conventions []convention `json:"conventions"`
	Groups      []string     `json:"groups,omitempty"`
	Forms       []form       `json:"forms,omitempty"`
	Scales      []scale      `json:"scales,omitempty"` // narrows FP8 groups to scale layouts
	// Declared narrows to what the config declares for the group ("": nothing).
	Declared []string `json:"declared,omitempty"`
	Also     []cond   `json:"also,omitempty"` // conditions on other groups (a fused layer's other members)
	// Env is an opt-in switch the rule needs (NAME=value); rules without it
	// describe the engine's defaults, which check evaluates.
	Env      string  `json:"env,omitempty"`
	Outcome  Outcome `json:"outcome"`
	Message  string  `json:"message,omitempty"`
	Why      string  `json:"why"`
	Source   source  `json:"source"`
	Evidence string  `json:"evidence"`

	groups model.GroupSet
}

// engine is an engine the rules speak about.
type engine struct {
	Name string `json:"name"`
	Repo string `json:"repo"`
	Read string `json:"read"` // which versions the rules were read at
}

// table is rules.json.
type table struct {
	Schema int `json:"schema"`
	// Family is the model family the rules were read for and hold for.
	Family  string   `json:"family"`
	Engines []engine `json:"engines"`
	Rules   []rule   `json:"rules"`
}

//go:embed rules.json
var rulesJSON []byte

// rules is rules.json, checked by the tests (load).
var rules = func() *table {
	var t table
	if err := json.Unmarshal(rulesJSON, &t); err != nil {
		panic("engines: rules.json: " + err.Error())
	}
	for i := range t.Rules {
		r := &t.Rules[i]
		var err error
		if r.groups, err = model.ParseGroupSet(strings.Join(r.Groups, ",")); err != nil {
			panic("engines: rules.json: rule " + r.ID + ": " + err.Error())
		}
	}
	return &t
}()

// EngineNames lists the engines, in the table's order.
func EngineNames() []string {
	out := make([]string, len(rules.Engines))
	for i, e := range rules.Engines {
		out[i] = e.Name
	}
	return out
}

// lookupEngine finds an engine by name, ignoring case, '-' and '_'
// (trtllm, TensorRT-LLM and tensorrt_llm are one engine; so is trt).
func lookupEngine(name string) (string, error) {
	norm := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) }
	n := norm(name)
	for _, e := range rules.Engines {
		if k := norm(e.Name); k == n || (n == "trt" || n == "trtllm") && k == "tensorrtllm" {
			return e.Name, nil
		}
	}
	return "", fmt.Errorf("engine %q is not one of %s", name, strings.Join(EngineNames(), ", "))
}

// ParseGPU reads sm90 or sm100 (also hopper, blackwell).
func ParseGPU(s string) (GPU, error) {
	switch strings.ToLower(s) {
	case "sm90", "hopper", "h100", "h200":
		return sM90, nil
	case "sm100", "blackwell", "b200", "b300":
		return sM100, nil
	}
	return "", fmt.Errorf("GPU %q: want sm90 (Hopper) or sm100 (Blackwell)", s)
}
