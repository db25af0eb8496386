package testckpt

import (
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
	_, tc, err := decodeConfig(configJSON)
	if err != nil {
		return nil, err
	}
	return model.MarshalConfig(tc)
}
