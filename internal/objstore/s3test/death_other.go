//go:build !linux

package s3test

import "os/exec"

// dieWithParent does nothing where there is no Pdeathsig: the server ends
// with the test binary's process group, or is left to the system.
func dieWithParent(*exec.Cmd) {}

// sharedServer: without Pdeathsig a shared server would outlive the test
// binary.
const sharedServer = false
