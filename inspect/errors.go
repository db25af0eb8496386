package inspect

import "errors"

// Sentinel errors of the package; every returned error wraps one of these (or a
// codec/model/layout sentinel) with the file or tensor concerned.
var (
	errUsage  = errors.New("invalid inspect options")           // an option value or combination that cannot be honoured
	errShape  = errors.New("tensor disagrees with config.json") // an error under Options.Strict, a warning otherwise
	errConfig = errors.New("bad checkpoint config")             // config.json or hf_quant_config.json present but unreadable
)
