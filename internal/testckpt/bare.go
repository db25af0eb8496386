package testckpt

import (
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
)

// BareConfig is the config.json of the bare kimi_linear checkpoint a
// kimi_k3 config.json's text model is: its text_config as the whole config.
func BareConfig(tb testing.TB, configJSON []byte) []byte {
	tb.Helper()
	_, tc, err := decodeConfig(configJSON)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := model.MarshalConfig(tc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
