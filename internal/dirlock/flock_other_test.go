//go:build !unix

package dirlock

const flockAvailable = false
