package testckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
)

// BareConfigJSON is the config.json of a bare kimi_linear checkpoint (no
// language_model. prefix, no vision) at a built-in scale: the scale's
// text_config as the whole config, its quantization_config then at the top
// level.
func BareConfigJSON(tb testing.TB, scale model.Scale) []byte {
	tb.Helper()
	b, err := model.ScaledConfigJSON(scale)
	if err != nil {
		tb.Fatal(err)
	}
	return BareConfig(tb, b)
}

// BareConfig is the config.json of the bare kimi_linear checkpoint a
// kimi_k3 config.json's text model is: its text_config as the whole config.
func BareConfig(tb testing.TB, configJSON []byte) []byte {
	tb.Helper()
	b, err := bareConfig(configJSON)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func bareConfig(configJSON []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(configJSON))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	tc, ok := m["text_config"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("config has no text_config")
	}
	return model.MarshalConfig(tc)
}
