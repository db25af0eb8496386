package safetensors

// parseIndex decodes an index, rejecting duplicate tensor names (which a plain
// JSON decoder would silently collapse) and entries that do not name a file
// inside the checkpoint directory. name labels errors.
func parseIndex(b []byte, name string) (*Index, error) {
	d, err := parseIndexData(b, name)
	if err != nil {
		return nil, err
	}
	return d.toIndex(name)
}
