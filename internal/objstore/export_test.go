package objstore

// PartSize is the default part size, for the external tests' object sizes.
const PartSize = defaultPartSize
