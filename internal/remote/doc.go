// Package remote reads checkpoint files over HTTP: https:// directories served
// with Range support and hf://org/name[@revision] repositories resolved the way
// huggingface_hub resolves them.
//
// A Source is one resolved location; its File values are io.ReaderAt views of
// single files that check every ranged response (status 206, Content-Range,
// body length, size and ETag — or Last-Modified — unchanged) and resume a
// transfer from the last byte received after a transient failure. Every read
// ends in bounded time: each attempt must keep up a minimum rate, a read
// retries a bounded number of times, and it has a deadline that grows with
// its size. Stream serves a plan's byte ranges, coalesced into requests run
// with bounded parallelism and memory, to readers that read them in the
// plan's order. List names a hub repository's files.
//
// A bearer token is sent only to the host that owns it (the hub endpoint),
// never to the host a redirect points at.
package remote
