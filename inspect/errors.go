package inspect

import "errors"

// Sentinel errors of the package; every returned error wraps one of these (or a
// codec/model/layout sentinel) with the file or tensor concerned.
var (
	// errUsage: an option value or combination that cannot be honoured.
	errUsage = errors.New("invalid inspect options")
	// errShape: a tensor whose shape or dtype disagrees with what config.json
	// implies, reported as an error under Options.Strict (a warning otherwise).
	errShape = errors.New("tensor disagrees with config.json")
	// errConfig: config.json or hf_quant_config.json present but unreadable.
	errConfig = errors.New("bad checkpoint config")
)
