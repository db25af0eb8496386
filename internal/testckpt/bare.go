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
	b, err := bareConfig(scale)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func bareConfig(scale model.Scale) ([]byte, error) {
	b, err := model.ScaledConfigJSON(scale)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	tc, ok := m["text_config"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s config has no text_config", scale)
	}
	return model.MarshalConfig(tc)
}
