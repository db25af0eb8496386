// Package safetensors reads and writes the safetensors format as a stream:
// a header is parsed from any io.ReaderAt (a file, HTTP ranges, an object
// store, a test fake) with the Rust reference's validation, a tensor's bytes
// are read through a section reader without loading the file, and the
// Writer emits files byte-identical to Python's safetensors.torch.save_file
// (checked against its goldens in testdata/golden). On top of single files
// it reads sharded checkpoints: the index, its shards and their headers,
// from a directory, a Hugging Face cache snapshot, or an hf:// or https://
// source. Memory follows the headers, never the tensor data.
package safetensors
