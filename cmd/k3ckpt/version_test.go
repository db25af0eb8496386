package main

import (
	"strings"
	"testing"
)

// TestVersionWithoutStamp: a build the go command did not stamp (a test
// binary is one, as is -buildvcs=false) says how to get the revision; one
// linked with -X main.revision names it.
func TestVersionWithoutStamp(t *testing.T) {
	v := readVersion()
	if v.Revision != "" {
		t.Skip("this test binary carries a VCS stamp")
	}
	if s := versionString(v); !strings.Contains(s, "revision unknown") || !strings.Contains(s, `-ldflags "-X main.revision=`) || v.Note == "" {
		t.Errorf("unstamped build: %q", s)
	}
	old := revision
	revision = "0123456789abcdef0123"
	defer func() { revision = old }()
	v = readVersion()
	if s := versionString(v); v.Note != "" || !strings.Contains(s, "(rev 0123456789ab)") {
		t.Errorf("linked revision: %q, note %q", s, v.Note)
	}
}
