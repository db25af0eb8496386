package testckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/k3ckpt/k3ckpt/model"
)

// LayersConfigJSON is the config.json of a built-in scale cut to its first n
// layers, MLA at every 4th (1-based) as in K3 and KDA at the others: every
// kind of tensor in n+3 shards instead of 96.
func LayersConfigJSON(tb testing.TB, scale model.Scale, n int) []byte {
	tb.Helper()
	b, err := model.FamilyConfigJSON("", scale)
	if err != nil {
		tb.Fatal(err)
	}
	b, err = EditTextConfig(b, func(tc map[string]any) error {
		lin, ok := tc["linear_attn_config"].(map[string]any)
		if !ok {
			return fmt.Errorf("%s config has no text_config.linear_attn_config", scale)
		}
		var full, kda []any
		for l := 1; l <= n; l++ {
			if l%4 == 0 {
				full = append(full, l)
			} else {
				kda = append(kda, l)
			}
		}
		tc["num_hidden_layers"] = n
		lin["full_attn_layers"], lin["kda_layers"] = full, kda
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := model.ParseConfig(b)
	if err != nil {
		tb.Fatalf("%s config cut to %d layers: %v", scale, n, err)
	}
	if c.NumLayers != n || c.NumShards() != n+3 {
		tb.Fatalf("%s config cut to %d layers has %d layers in %d shards", scale, n, c.NumLayers, c.NumShards())
	}
	return b
}

// TPConfigJSON is the tiny config with experts and MLA heads that split 8
// ways (pp8-tp8), which the tiny replica's (one MXFP4 scale group per w2 row)
// cannot: 16 experts of width 256 and one 128-row q_b_proj head per rank,
// whose block scales follow their slices as K3's 2304-row slices do.
func TPConfigJSON(tb testing.TB) []byte {
	tb.Helper()
	b, err := model.FamilyConfigJSON("", model.ScaleTiny)
	if err == nil {
		b, err = EditTextConfig(b, func(tc map[string]any) error {
			tc["moe_intermediate_size"] = 256
			tc["num_experts"] = 16
			tc["qk_nope_head_dim"] = 64
			tc["qk_rope_head_dim"] = 64
			return nil
		})
	}
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// EditTextConfig returns configJSON with its text_config changed by edit,
// numbers kept as written and rendered as the released file is.
func EditTextConfig(configJSON []byte, edit func(textConfig map[string]any) error) ([]byte, error) {
	m, tc, err := decodeConfig(configJSON)
	if err != nil {
		return nil, err
	}
	if err := edit(tc); err != nil {
		return nil, err
	}
	return model.MarshalConfig(m)
}

// decodeConfig decodes a config.json keeping its numbers as written, and
// finds its text_config.
func decodeConfig(configJSON []byte) (m, textConfig map[string]any, err error) {
	d := json.NewDecoder(bytes.NewReader(configJSON))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, nil, err
	}
	tc, ok := m["text_config"].(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("config has no text_config")
	}
	return m, tc, nil
}

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
