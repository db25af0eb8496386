// Package remote reads checkpoint files over HTTP: https:// directories served
// with Range support and hf://org/name[@revision] repositories resolved the way
// huggingface_hub resolves them.
//
// A Source is one resolved location; its File values are io.ReaderAt views of
// single files that check every ranged response (status 206, Content-Range,
// body length, size and ETag — or Last-Modified — unchanged) and resume after
// a transient failure from the last byte received. Every read ends in bounded
// time: a minimum rate per attempt, bounded retries, a deadline that grows
// with its size. Stream serves a plan's byte ranges, coalesced into requests
// with bounded parallelism and memory, to readers in the plan's order.
//
// A bearer token is sent only to the host that owns it (the hub endpoint),
// never to the host a redirect points at.
package remote
