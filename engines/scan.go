package engines

import (
	"context"
	"errors"
	"fmt"

	"github.com/k3ckpt/k3ckpt/convert"
	"github.com/k3ckpt/k3ckpt/model"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

// Scan reads a checkpoint's facts from config.json, hf_quant_config.json
// (when present), the index and the shard headers, one header at a time:
// no tensor data is read. path is anything safetensors.OpenShards opens (a
// directory, an index, a hub snapshot, an https:// or hf:// URL).
func Scan(ctx context.Context, path string) (*Facts, error) {
	s, err := safetensors.OpenShards(ctx, path)
	if err != nil {
		return nil, err
	}
	config, err := s.ReadAux(model.ConfigName)
	if err != nil {
		if errors.Is(err, safetensors.ErrNotFound) {
			return nil, fmt.Errorf("%s: no %s: the engines decide how to load a checkpoint from it; check needs it", path, model.ConfigName)
		}
		return nil, err
	}
	hfq, err := s.ReadAux(convert.HFQuantConfigName)
	if err != nil && !errors.Is(err, safetensors.ErrNotFound) {
		return nil, err
	}
	sc, err := scannerFor(config, hfq)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.Walk(ctx, true, func(_ int, f *safetensors.File) error {
		sc.file(f.Tensors)
		return nil
	}); err != nil {
		return nil, err
	}
	return sc.finish(), nil
}

// FactsOf reads the facts of a checkpoint given as its configs and each
// file's tensors (a conversion plan's outputs, before they are written).
func FactsOf(config, hfq []byte, files [][]safetensors.TensorInfo) (*Facts, error) {
	sc, err := scannerFor(config, hfq)
	if err != nil {
		return nil, err
	}
	for _, ts := range files {
		sc.file(ts)
	}
	return sc.finish(), nil
}

// scannerFor reads the configs; names are classified with the config's
// layer schedule, or K3's public one when the schema rejects the config (a
// hand-edited config still gets its verdicts).
func scannerFor(config, hfq []byte) (*scanner, error) {
	cf, err := readConfigs(config, hfq)
	if err != nil {
		return nil, err
	}
	cls := model.K3Classifier()
	if cfg, err := model.ParseConfig(config); err == nil {
		cls = cfg.Classifier
	}
	return &scanner{cf: cf, cls: cls, family: model.FamilyOfConfig(config), pending: map[string]*module{}, parts: map[part]*part{}}, nil
}
