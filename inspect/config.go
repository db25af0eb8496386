package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// quantSection is config.json's quantization_config or hf_quant_config.json.
type quantSection struct {
	File string `json:"file"`          // the config file it comes from
	Key  string `json:"key,omitempty"` // the section's dotted key in File ("": the whole file)
	// Summary flattens the section into "dotted.key: value" lines.
	Summary []string        `json:"summary"`
	Raw     json.RawMessage `json:"raw"` // the section as written
}

// Limits of a quantization summary: deep or wide parts are counted, not
// listed, so a ModelOpt file naming 1,600 modules stays a dozen lines.
const (
	summaryDepth    = 3  // levels of nested objects spelled out
	summaryMaxList  = 4  // the longest array shown element by element
	summaryMaxWidth = 12 // the widest object shown key by key
)

// readConfigs reads config.json (for classification and the shape check) and
// the quantization descriptions. Without config.json, or with one the schema
// rejects (an error if Strict), it warns and uses the public K3 schedule.
func (a *auditor) readConfigs() ([]quantSection, error) {
	var secs []quantSection
	b, ok, err := a.readAux(model.ConfigName)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	case !ok:
		a.warn.add(fmt.Sprintf("no %s: classified with the public K3 layer schedule; shapes not checked", model.ConfigName))
	default:
		cfg, perr := model.ParseConfig(b)
		if perr != nil {
			if a.opts.Strict {
				return nil, fmt.Errorf("%s: %w: %w", model.ConfigName, errConfig, perr)
			}
			a.warn.add(fmt.Sprintf("%s: %v: classified with the public K3 layer schedule; shapes not checked", model.ConfigName, perr))
		}
		a.cfg = cfg
		// Where the schema read quantization_config (inside text_config in
		// the release); the top level when the schema rejected the config.
		path := "quantization_config"
		if cfg != nil {
			path = cfg.QuantizationPath
		}
		q, err := rawAt(b, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %v", model.ConfigName, errConfig, err)
		}
		if q != nil {
			s, err := newSection(model.ConfigName, path, q)
			if err != nil {
				return nil, err
			}
			secs = append(secs, s)
		}
	}
	hb, ok, err := a.readAux(convert.HFQuantConfigName)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if ok {
		s, err := newSection(convert.HFQuantConfigName, "", hb)
		if err != nil {
			return nil, err
		}
		secs = append(secs, s)
	}
	return secs, nil
}

// readAux reads a side file, counting its bytes; ok is false when there is none.
func (a *auditor) readAux(name string) (b []byte, ok bool, err error) {
	b, err = a.src.readAux(name)
	if errors.Is(err, safetensors.ErrNotFound) {
		return nil, false, nil
	}
	a.auxBytes += int64(len(b))
	return b, err == nil, err
}

// rawAt returns the JSON value at a dotted path of b, nil for "" or absent.
func rawAt(b []byte, path string) (json.RawMessage, error) {
	if path == "" {
		return nil, nil
	}
	cur := json.RawMessage(b)
	for k := range strings.SplitSeq(path, ".") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(cur, &obj); err != nil {
			return nil, err
		}
		v, ok := obj[k]
		if !ok {
			return nil, nil
		}
		cur = v
	}
	return cur, nil
}

func newSection(file, key string, raw []byte) (quantSection, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return quantSection{}, fmt.Errorf("%s: %w: %v", file, errConfig, err)
	}
	s := quantSection{File: file, Key: key, Raw: json.RawMessage(raw)}
	summarize(&s.Summary, "", v, 0)
	return s, nil
}

// summarize flattens a JSON value into "path: value" lines.
func summarize(out *[]string, path string, v any, depth int) {
	switch x := v.(type) {
	case map[string]any:
		if depth >= summaryDepth || len(x) > summaryMaxWidth {
			*out = append(*out, fmt.Sprintf("%s: {%d entries}", path, len(x)))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			summarize(out, p, x[k], depth+1)
		}
	case []any:
		if len(x) > summaryMaxList {
			*out = append(*out, fmt.Sprintf("%s: [%d entries]", path, len(x)))
			return
		}
		parts := make([]string, len(x))
		for i, e := range x {
			switch e.(type) {
			case map[string]any, []any:
				*out = append(*out, fmt.Sprintf("%s: [%d entries]", path, len(x)))
				return
			}
			b, _ := json.Marshal(e)
			parts[i] = string(b)
		}
		*out = append(*out, fmt.Sprintf("%s: [%s]", path, strings.Join(parts, ", ")))
	default:
		b, _ := json.Marshal(x)
		*out = append(*out, fmt.Sprintf("%s: %s", path, b))
	}
}
