package safetensors

// AppendPythonJSONString appends s as Python's json.dumps writes a string by
// default (ensure_ascii): the escaping of huggingface index files and
// config.json files, so other writers of those files share this one escaper.
func AppendPythonJSONString(b []byte, s string) []byte { return appendJSONString(b, s, true) }
