package testckpt

import (
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
)

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
