package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/k3ckpt/k3ckpt/convert"
)

// withDestHint rewords a convert.ErrDestination refusal of the command line
// args for the user: what DST holds and the ways on, without the library's
// class in front ("destination holds a different conversion" is wrong for a
// DST that holds unrelated files).
func withDestHint(err error, args []string) error {
	if !errors.Is(err, convert.ErrDestination) {
		return err
	}
	msg := strings.Replace(err.Error(), convert.ErrDestination.Error()+": ", "", 1)
	restart := slices.Contains(args, "--restart") || slices.Contains(args, "--restart=true")
	switch {
	case strings.Contains(msg, " is converting plan "):
		msg += "\nits run is unfinished: to finish it, rerun the command that started it (its recipe and flags above);"
		if restart {
			msg += "\n--restart starts over only a run of the same plan;"
		}
		msg += "\nto give it up, delete that directory, or convert into another one"
	case strings.Contains(msg, " holds a finished conversion "):
		msg += "\nto replace it, delete that directory first, or convert into another one"
	case strings.Contains(msg, " holds no k3ckpt conversion"):
		msg += "\nconvert writes only into an empty or new directory, or one of its own runs: choose another, or empty this one"
	}
	return &rewordedError{msg: msg, err: err}
}
