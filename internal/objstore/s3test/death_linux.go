package s3test

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server when the test binary (the
// thread that started it) goes, however it goes.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// sharedServer: a server started here dies with the test binary, so one
// serves all its tests.
const sharedServer = true
