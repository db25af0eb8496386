package inspect

import "github.com/k3ckpt/k3ckpt/convert"

// asIs is the recipe of an --experts what-if without --recipe: every tensor
// kept, so only the experts' cast changes the accounting.
var asIs = &convert.Recipe{Name: "as-is", Doc: "every tensor kept (only --experts changes)"}

// lookupRecipe resolves --recipe; "" is the as-is recipe.
func lookupRecipe(name string) (*convert.Recipe, error) {
	if name == "" {
		return asIs, nil
	}
	return convert.Lookup(name)
}
