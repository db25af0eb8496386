package convert

import (
	"context"
	"os"
	"testing"

	"github.com/k3ckpt/k3ckpt/quant"
	"github.com/k3ckpt/k3ckpt/safetensors"
)

func TestZZProf(t *testing.T) {
	src := os.Getenv("K3PROF")
	if src == "" {
		t.Skip()
	}
	c, err := safetensors.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := Lookup(ModelOptK3)
	p, err := NewPlan(c, nil, r, Options{Format: ModelOpt, Experts: ExpertsNVFP4, Numerics: quant.ModelOpt})
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := Execute(context.Background(), p, dst, ExecOptions{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
}
