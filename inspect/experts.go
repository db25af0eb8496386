package inspect

import "github.com/k3ckpt/k3ckpt/convert"

// asIs is the recipe of an --experts what-if without --recipe: every tensor
// kept, so only the experts' cast changes the accounting.
var asIs = func() *convert.Recipe {
	r, err := convert.NewRecipe("as-is", "every tensor kept (only --experts changes)", convert.Keep, nil)
	if err != nil {
		panic("inspect: the as-is recipe is invalid: " + err.Error()) // no patterns: cannot fail
	}
	return r
}()

// lookupRecipe resolves --recipe; "" is the as-is recipe.
func lookupRecipe(name string) (*convert.Recipe, error) {
	if name == "" {
		return asIs, nil
	}
	return convert.Lookup(name)
}

// convertOptions are the options the what-if output is planned with.
func (a *auditor) convertOptions() convert.Options {
	return convert.Options{Format: a.opts.Format, Experts: a.opts.Experts}
}
