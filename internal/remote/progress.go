package remote

// progress hears a transfer as it happens. Its methods are called from many
// goroutines at once and must be cheap (count, do not print).
type progress interface {
	// Fetched reports n more body bytes received from the network.
	Fetched(n int64)
	// Retry reports a failed attempt about to be retried.
	Retry(ev RetryEvent)
}
