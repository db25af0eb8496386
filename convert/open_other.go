//go:build !unix

package convert

import "os"

const openFlags = os.O_RDONLY
